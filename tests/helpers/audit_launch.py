"""Run app.py with a Python audit hook that logs every socket connect and name lookup.

Usage: python audit_launch.py LOGFILE app.py [app args...]
"""

import ipaddress
import json
import runpy
import sys
from pathlib import Path


def is_loopback(host) -> bool:
    if host in (None, "", "localhost", "0.0.0.0", "::"):
        return True
    if isinstance(host, bytes):
        host = host.decode()
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def main() -> None:
    log_path, app_path, *app_args = sys.argv[1:]
    log = open(log_path, "a", buffering=1)

    def hook(event, args):
        if event == "socket.connect":
            addr = args[1]
            addr = addr if isinstance(addr, str) else list(addr)[:2]
            log.write(json.dumps({"event": "connect", "addr": addr}, default=str) + "\n")
        elif event == "socket.getaddrinfo":
            log.write(json.dumps({"event": "getaddrinfo", "host": args[0]}, default=str) + "\n")

    sys.addaudithook(hook)
    sys.argv = [app_path, *app_args]
    sys.path.insert(0, str(Path(app_path).resolve().parent))
    runpy.run_path(app_path, run_name="__main__")


if __name__ == "__main__":
    main()
