"""Inputs every tab uses: numbers, sliders and images checked against their ranges before they cost
anything (fields), one rule for Enter (enter), and the model picker (model_picker)."""
