"""Fixtures for the MCP tests: the official `mcp` SDK from PyPI as the client, capdir as the
server, over stdio (`capdir mcp`) and Streamable HTTP (a live `capdir serve` on loopback).

Each test gets its own Git copy of the bundled catalogue, built into its own site, and its own
receipt ledger. `CAPDIR_BIN` names the capdir binary (tests/mcp_sdk.rs sets it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
OWNER = "mcp-test-owner-key"
TOKEN_KEY = "mcp-test-token-signing-key-0123456789abcdef"
DATE = "2024-01-01T00:00:00Z"


def capdir_bin() -> str:
    path = os.environ.get("CAPDIR_BIN")
    if not path or not Path(path).is_file():
        pytest.exit(
            "CAPDIR_BIN must name the capdir binary; run these tests through `cargo test --test mcp_sdk`",
            returncode=2,
        )
    return path


def git(repo: Path, *args: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_DATE=DATE, GIT_COMMITTER_DATE=DATE)
    subprocess.run(
        ["git", "-c", "user.name=Ada", "-c", "user.email=ada@example.com", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def build(catalogue: Path, site: Path) -> None:
    done = subprocess.run(
        [capdir_bin(), "build", str(catalogue), "--out", str(site)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"capdir build failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="session")
def template(tmp_path_factory) -> Path:
    """The bundled catalogue in a fresh Git repository, built once."""
    root = tmp_path_factory.mktemp("template")
    repo = root / "repo"
    shutil.copytree(ROOT / "catalogue", repo / "catalogue")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "The bundled catalogue")
    build(repo / "catalogue", root / "site")
    return root


@dataclass
class World:
    """One test's catalogue repository, site, ledger and breaker state."""

    root: Path

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def site(self) -> Path:
        return self.root / "site"

    @property
    def ledger(self) -> Path:
        return self.root / "data" / "ledger.sqlite"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def add_row(self, key: str, what: str) -> None:
        """Commit a new fn row and rebuild the site in place, as a publish would."""
        (self.repo / "catalogue" / f"{key}.yaml").write_text(
            f"key: {key}\ntype: fn\ntarget: echo\ncategory: text\n"
            "content: |\n"
            f"  # WHAT: {what}\n"
            "  # WHEN_TO_USE: When a test needs a row that was not there before.\n"
            "  # ARGS: $1=text\n"
            "  # EX: hi\n"
            "  # OUTPUT: the text\n"
            '  ["$1"]\n'
            "asks:\n"
            "  - repeat these words like a parrot\n"
        )
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", f"Add {key}")
        build(self.repo / "catalogue", self.site)

    def mint(self, audience: str, *flags: str) -> str:
        """A capability token for the dispatcher at `audience` (`capdir token mint`)."""
        done = subprocess.run(
            [capdir_bin(), "token", "mint", "--audience", audience, "--site", str(self.site),
             "--data", str(self.data), "--ledger", f"sqlite:{self.ledger}", *flags],
            capture_output=True,
            text=True,
            env=dict(os.environ, CAPDIR_TOKEN_KEY=TOKEN_KEY),
        )
        assert done.returncode == 0, f"capdir token mint failed: {done.stderr}"
        return done.stdout.strip().splitlines()[-1]

    def receipt(self, receipt_id: str) -> dict:
        """The receipt as `capdir ledger show` prints it (exit 0 only when it exists)."""
        import json

        done = subprocess.run(
            [capdir_bin(), "ledger", "show", receipt_id, "--ledger", f"sqlite:{self.ledger}"],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, f"no receipt {receipt_id}: {done.stderr}"
        return json.loads(done.stdout)


@pytest.fixture
def world(template: Path, tmp_path: Path) -> World:
    shutil.copytree(template / "repo", tmp_path / "repo")
    shutil.copytree(template / "site", tmp_path / "site")
    return World(tmp_path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server(world: World, projection: str, page_size: int):
    """`capdir serve` on a loopback port; yields the /mcp URL once the dispatcher answers."""
    port = free_port()
    log = open(world.root / "serve.log", "w")
    proc = subprocess.Popen(
        [
            capdir_bin(), "serve",
            "--site", str(world.site),
            "--addr", f"127.0.0.1:{port}",
            "--ledger", f"sqlite:{world.ledger}",
            "--data", str(world.data),
            "--mcp", projection,
            "--mcp-page-size", str(page_size),
        ],
        env=dict(os.environ, CAPDIR_OWNER_KEY=OWNER, CAPDIR_TOKEN_KEY=TOKEN_KEY, RUST_LOG="warn"),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=world.root,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"capdir serve exited: {(world.root / 'serve.log').read_text()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/dispatch?map=1", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@dataclass
class Connected:
    """An initialized SDK session and the server notifications it has received."""

    session: ClientSession
    init: types.InitializeResult
    notifications: list = field(default_factory=list)
    list_changed: anyio.Event = field(default_factory=anyio.Event)

    async def all_tools(self) -> tuple[list[types.Tool], int]:
        """Every tool, following nextCursor; and how many pages it took."""
        tools: list[types.Tool] = []
        cursor = None
        pages = 0
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self.session.list_tools(params=params)
            pages += 1
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools, pages


@contextlib.asynccontextmanager
async def connect(world: World, transport: str, projection: str = "full", *, page_size: int = 100,
                  credential=OWNER):
    """An initialized SDK client over `transport` ("stdio" or "http"). Over HTTP the credential
    may be a function of the dispatcher's base URL (a token must name it as its audience)."""
    holder: dict = {}

    async def on_message(message) -> None:
        c = holder.get("c")
        if c is None:
            return
        c.notifications.append(message)
        if isinstance(message, types.ToolListChangedNotification):
            c.list_changed.set()

    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            params = StdioServerParameters(
                command=capdir_bin(),
                args=[
                    "mcp",
                    "--site", str(world.site),
                    "--mcp", projection,
                    "--page-size", str(page_size),
                    "--ledger", f"sqlite:{world.ledger}",
                    "--data", str(world.data),
                ],
                env={"RUST_LOG": "warn"},
                cwd=str(world.root),
            )
            read, write = await stack.enter_async_context(stdio_client(params, errlog=sys.stderr))
        else:
            url = stack.enter_context(http_server(world, projection, page_size))
            if callable(credential):
                credential = credential(url.removesuffix("/mcp"))
            headers = {"Authorization": f"Bearer {credential}"} if credential else {}
            client = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
            )
            read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
        session = await stack.enter_async_context(ClientSession(read, write, message_handler=on_message))
        with anyio.fail_after(30):
            init = await session.initialize()
        c = Connected(session=session, init=init)
        holder["c"] = c
        yield c


@pytest.fixture(params=["stdio", "http"])
def transport(request) -> str:
    return request.param
