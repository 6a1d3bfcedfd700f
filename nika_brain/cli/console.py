"""`nika-brain console`: the operator's web page for the whole federation (nika_brain.console)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from nika_brain.brain import Brain
from nika_brain.cli import app


@app.command("console")
def console(
    port: int = typer.Option(8765, "--port", help="TCP port (0: any free one)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (loopback unless TLS or --insecure)"),
    open_browser: bool = typer.Option(False, "--open", help="open the page in a browser"),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="TLS certificate (PEM)"),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="TLS private key (PEM)"),
    insecure: bool = typer.Option(False, "--insecure", help="serve a non-loopback address without TLS"),
):
    """Serve the operator console; its first line is the URL with the session token."""
    from nika_brain.console.server import serve
    serve(Brain.find(), host=host, port=port, open_browser=open_browser, tls_cert=tls_cert, tls_key=tls_key,
          insecure=insecure)
