"""The report's third stage: the derived numbers in words, sentences and tables, formatted
once (three significant digits, binary sizes) for both the Markdown and the HTML page."""
