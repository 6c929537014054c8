"""The report's second stage: every table, finding and check derived once from the loaded
inputs (:class:`~ring.report.derive.model.ReportModel`), before anything is drawn or written."""
