"""Workarounds for Gradio behaviour the app cannot accept: each applied by app.py with a unit test
(patches); the one that must be in place before gradio is imported (stubs)."""
