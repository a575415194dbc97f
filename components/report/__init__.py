"""The session report: one HTML file of a visitor's results (session), what is kept per session
(record), and the page itself (html)."""
