"""The refusals of model loading, below every module that raises them."""


class PresetError(ValueError):
    """A preset, hub id or path that the workbench refuses to load."""


class ModelCheckError(PresetError):
    """A model the workbench will not load for a method, with the reason."""
