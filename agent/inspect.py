"""`python -m agent.inspect PATH [out=DIR] [serve=true] [port=N] [definition=D,…] [workload=W,…]`: a static site for
reading runs in the browser, turn by turn: PATH is a run folder, a bench folder, or a folder of either;
definition= and workload= (m70, s4096, all) keep only those runs (the pages filter by both too). Writes
OUT/index.html and its pages (no server and no network needed: they open from file://), prints where; with
serve=true, then serves them on 127.0.0.1 until interrupted. Exit status 0 written (runs that could not be read
are listed on the pages and on stderr); 2 usage error, or no run folder under PATH (or none the filter keeps)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from agent import cli
from tools.extras import needs

with needs("agent", "python -m agent.inspect"):
    from agent.bench.inspect.site import build_site, server
    from agent.loop.records import RunFilter
    from agent.loop.store import find_runs


class InspectSettings(BaseModel):
    paths: list[Path] = Field([], description="A run folder, a bench folder, or a folder of either.")
    out: Path | None = Field(None, description="Where to write the site (default: PATH/site).")
    serve: bool = Field(False, description="Then serve the site on 127.0.0.1 (the standard library's server).")
    port: int = Field(8000, ge=0, le=65535, description="The port serve=true listens on (0: any free one).")
    definition: str | None = Field(None, description="Only runs of these definitions (comma-separated).")
    workload: str | None = Field(None, description="Only runs at these workloads (m70, s4096, all; comma-separated).")


def usage() -> str:
    return cli.usage(InspectSettings, "python -m agent.inspect PATH [out=DIR] [serve=true] [port=N] [definition=…] "
                     "[workload=…]", __doc__, "paths", "PATH")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _inspect, argv)


def _inspect(argv: list[str]) -> int:
    settings = cli.read(InspectSettings, argv, "paths")
    if len(settings.paths) != 1:
        raise cli.ConfigError("name one PATH: a run folder, a bench folder, or a folder of either")
    path = settings.paths[0]
    if not path.is_dir():
        raise cli.ConfigError(f"not a folder: {path}")
    if not find_runs([path]):
        raise cli.ConfigError(f"no run folders under {path}")
    out = settings.out or path / "site"
    selection = RunFilter(definition=settings.definition, workload=settings.workload)
    try:
        site = build_site(path, out, selection)
    except OSError as e:
        raise cli.ConfigError(f"cannot write the site to out={out}: {e.strerror} ({e.filename})") from None
    if selection and not site.runs:
        raise cli.ConfigError(f"no run under {path} has {selection.describe()}")
    for u in site.unreadable:
        print(f"warning: not shown: {u.path}: {u.reason}", file=sys.stderr)
    print(f"{site.index}  ({site.pages:,} pages, {site.runs:,} runs; index {site.index_seconds:.1f} s, "
          f"all {site.seconds:.1f} s)")  # fmt: skip
    if settings.serve:
        return _serve(out, settings.port)
    return 0


def _serve(out: Path, port: int) -> int:
    try:
        httpd = server(out, port)
    except OSError as e:
        raise cli.ConfigError(f"cannot listen on 127.0.0.1:{port} ({e.strerror}); choose another port=N") from None
    with httpd:
        print(f"serving {out} at http://127.0.0.1:{httpd.server_address[1]}/ (Ctrl-C stops)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a server is stopped: not an error
            httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
