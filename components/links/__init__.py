"""Deep links: a URL that reopens a tab with its settings and reruns its results (deep_links), and
how a value travels in a URL (values)."""
