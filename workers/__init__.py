"""Workers: model-side code and the regression metrics."""
