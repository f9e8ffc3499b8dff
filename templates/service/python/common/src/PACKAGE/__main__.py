"""`python -m {{package}}`: runs the server until SIGTERM or SIGINT (server.main says how)."""

from .server import main

raise SystemExit(main())
