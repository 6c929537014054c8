"""The report's last stage: ``report.md``, ``index.html`` and their appendix, written from
the words and the figures with Jinja2 templates."""
