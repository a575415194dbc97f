"""The workbench beside the papers' official code (see __main__.py); one module per method."""
