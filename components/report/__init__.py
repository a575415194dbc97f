"""The session report: one HTML file of a visitor's results (session), what is kept per session
(record), and the page itself (html)."""


def redraw(fn):
    """Declare a handler a redraw: it draws a result already computed under another view rule (e.g.
    Relevance's bars with the template tokens in) or with a pinned result beside it (a tab's pin and
    unpin), so the report keeps the record of the computation rather than taking the redraw for a
    new result (components.report.session)."""
    fn.report_redraw = True
    return fn
