"""Who a request's visitor is: a person, not a session.

Sessions are free to make (every page load, every gradio_client, every raw call with a made-up
`session_hash` is a new one), so a limit per session bounds nobody. The allowances of a visitor
(places in the queue, turns in the model queue, disk, uploads) are counted per person, the way
Hugging Face Spaces tell people apart:

- the signed-in Hugging Face user, where the Space enables sign-in (`hf_oauth: true` in the
  README's front matter: Gradio's OAuth keeps the user in the request's session cookie), counted
  as one person from any address;
- else the client address. Behind a proxy (a Space's own), the connecting address is the proxy's:
  the visitor's is the one the proxy appended to `X-Forwarded-For`, `WORKBENCH_PROXY_HOPS` from
  the right (default 1 on a Space, where `SPACE_ID` is set, 0 elsewhere). Addresses a client wrote
  into the header itself stand further left and are never read, so a client cannot pick its own.

The key is a keyed hash (backend.core.sessions.key_of): neither a user name nor an address is kept
in memory, in a folder name or in a log line.
"""

from __future__ import annotations

import os

from backend.core import sessions

HOPS_ENV = "WORKBENCH_PROXY_HOPS"


def proxy_hops() -> int:
    raw = os.environ.get(HOPS_ENV, "").strip()
    if not raw:
        return 1 if os.environ.get("SPACE_ID") else 0
    try:
        return max(int(raw), 0)
    except ValueError:
        raise ValueError(f"{HOPS_ENV} must be a whole number ≥ 0 (proxies in front of the app), not {raw!r}") from None


def _signed_in(request, username: str | None) -> str | None:
    if username:
        return str(username)
    scope = getattr(getattr(request, "request", request), "scope", None)
    if isinstance(scope, dict) and isinstance(scope.get("session"), dict):  # Gradio's OAuth session
        info = scope["session"].get("oauth_info") or {}
        user = (info.get("userinfo") or {}).get("preferred_username") if isinstance(info, dict) else None
        if user:
            return str(user)
    return None


def address(headers, client_host: str | None, hops: int | None = None) -> str:
    """The visitor's address: the `hops`-th address from the right of X-Forwarded-For (what the
    trusted proxies appended), else the connecting one."""
    hops = proxy_hops() if hops is None else hops
    if hops:
        # every X-Forwarded-For line, in order (a proxy may add a line of its own)
        forwarded = ",".join(
            headers.getlist("x-forwarded-for")
            if hasattr(headers, "getlist")
            else [headers.get("x-forwarded-for") or ""]
        )
        chain = [a.strip() for a in forwarded.split(",") if a.strip()]
        if len(chain) >= hops:
            return chain[-hops]
    return client_host or "unknown"


def raw_identity(request, username: str | None = None) -> str:
    """'user:<name>' for a signed-in visitor, else 'addr:<address>' (not hashed: see `key`)."""
    user = _signed_in(request, username)
    if user:
        return "user:" + user
    headers = getattr(request, "headers", None) or {}
    client = getattr(request, "client", None)
    host = getattr(client, "host", None) if client is not None else None
    return "addr:" + address(headers, host)


def key(request, username: str | None = None) -> str:
    """The person behind `request` (a gr.Request or Gradio's fastapi.Request), as a keyed hash;
    'nobody' where there is no request (a direct call from Python)."""
    if request is None:
        return "nobody"
    return sessions.key_of(raw_identity(request, username))
