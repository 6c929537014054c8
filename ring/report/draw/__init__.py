"""The report's fourth stage: the figures, PNG and SVG, one question each."""
