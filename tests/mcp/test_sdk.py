"""capdir as an MCP server, driven by the official `mcp` Python SDK over stdio and Streamable
HTTP: initialize, tools/list in both projections (with pagination), a call with its receipt,
refused calls, and tools/list_changed after a rebuild adds a row.
"""

from __future__ import annotations

import hashlib
import json

import anyio
import pytest
from mcp import MCPError

from conftest import World, connect

SUPPORTED = {"2025-11-25", "2025-06-18"}


def structured(result) -> dict:
    """The result's structured content, which must equal the JSON of its text block."""
    assert result.structured_content is not None, result
    text = json.loads(result.content[0].text)
    assert text == result.structured_content
    return result.structured_content


def run(test):
    """Run an async test body on anyio's default backend (asyncio)."""
    anyio.run(test)


def test_initialize_and_list_the_full_projection(world: World, transport: str):
    expected = json.loads((world.site / "mcp" / "tools.json").read_text())["tools"]
    counts = json.loads((world.site / "counts.json").read_text())

    async def body():
        async with connect(world, transport, "full", page_size=10) as c:
            assert c.init.protocol_version in SUPPORTED
            assert c.init.server_info.name == "capdir"
            assert c.init.capabilities.tools is not None
            assert c.init.capabilities.tools.list_changed is True
            await c.session.send_ping()
            tools, pages = await c.all_tools()
            names = [t.name for t in tools]
            # One tool per enabled, planner-visible row, each exactly once, over several pages.
            assert sorted(names) == sorted(t["name"] for t in expected)
            assert len(names) == len(set(names)) == counts["mcp"]["value"]
            assert pages == -(-len(names) // 10) and pages > 1
            by_name = {t.name: t for t in tools}
            sha = by_name["SHA256"]
            assert sha.input_schema["properties"]["text"]["type"] == "string"
            assert sha.description.startswith("Compute the SHA-256 hash")
            assert "When to use:" in sha.description
            # GET http rows are read-only; a POST row is not.
            assert by_name["GITHUB_REPO_INFO"].annotations.read_only_hint is True
            assert by_name["GITHUB_CREATE_ISSUE"].annotations.read_only_hint is False

    run(body)


def test_meta_projection_asks_reads_and_invokes(world: World, transport: str):
    async def body():
        async with connect(world, transport, "meta") as c:
            assert c.init.capabilities.tools.list_changed is False
            tools, pages = await c.all_tools()
            assert [t.name for t in tools] == ["ask", "contract", "invoke"] and pages == 1

            found = structured(await c.session.call_tool("ask", {"query": "sha256 hash of this text"}))
            assert found["best"]["key"] == "SHA256"

            contract = await c.session.call_tool("contract", {"key": "SHA256"})
            assert not contract.is_error
            assert "SHA256" in contract.content[0].text and "ARGS" in contract.content[0].text

            done = await c.session.call_tool("invoke", {"key": "SHA256", "body": "abc"})
            assert not done.is_error, done
            out = structured(done)
            assert out["output"] == hashlib.sha256(b"abc").hexdigest()
            assert world.receipt(out["receipt"])["key"] == "SHA256"

            unknown = await c.session.call_tool("contract", {"key": "SHA265"})
            assert unknown.is_error
            err = structured(unknown)
            assert err["error"]["code"] == "unknown_key" and "SHA256" in err["did_you_mean"]

    run(body)


def test_a_call_returns_its_receipt(world: World, transport: str):
    async def body():
        async with connect(world, transport, "full") as c:
            result = await c.session.call_tool("SHA256", {"text": "hello world"})
            assert not result.is_error, result
            out = structured(result)
            assert out["status"] == "PROVEN_MATERIAL_RESULT"
            assert out["output"] == hashlib.sha256(b"hello world").hexdigest()
            assert out["receipt"].startswith("inv_")
            # The receipt is durable before the answer, in the ledger the CLI reads.
            receipt = world.receipt(out["receipt"])
            assert receipt["key"] == "SHA256" and receipt["actor"] == "owner"
            assert receipt["status"] == "PROVEN_MATERIAL_RESULT"
            assert receipt["output_sha256"] == hashlib.sha256(out["output"].encode()).hexdigest()

    run(body)


def test_refused_calls(world: World, transport: str):
    async def body():
        async with connect(world, transport, "full") as c:
            # Too few arguments: refused by the gate, before any runner, with a receipt.
            refused = await c.session.call_tool("SHA256", {})
            assert refused.is_error
            err = structured(refused)
            assert err["error"]["code"] == "refused" and err["reason"] == "missing_args"
            assert "# ARGS:" in err["error"]["message"]
            assert world.receipt(err["receipt"])["status"] == "REFUSED"

            # A typed argument of the wrong shape is refused naming it.
            bad = structured(await c.session.call_tool("SHA256", {"txt": "x"}))
            assert bad["error"]["code"] == "refused" and bad["reason"] == "bad_args"

            # A tool that is not there is a protocol error, with a suggestion.
            with pytest.raises(MCPError) as raised:
                await c.session.call_tool("SHA265", {"text": "x"})
            assert raised.value.code == -32602
            assert "SHA256" in raised.value.error.data["did_you_mean"]

    run(body)


def test_http_without_a_credential_may_list_but_not_invoke(world: World):
    async def body():
        async with connect(world, "http", "full", credential=None) as c:
            tools, _ = await c.all_tools()
            assert any(t.name == "SHA256" for t in tools)
            refused = await c.session.call_tool("SHA256", {"text": "x"})
            assert refused.is_error
            assert structured(refused)["error"]["code"] == "unauthorized"

    run(body)


def test_a_sensitive_call_by_a_low_token_waits_for_a_person(world: World):
    """Through MCP, a call that needs approval answers its pending status and where to poll
    (not an error: nothing failed), with a PENDING_APPROVAL receipt; nothing ran."""

    async def body():
        def token(base: str) -> str:
            return world.mint(base, "--keys", "GITHUB_CREATE_ISSUE", "--risk", "low")

        async with connect(world, "http", "full", credential=token) as c:
            result = await c.session.call_tool(
                "GITHUB_CREATE_ISSUE", {"owner": "o", "repo": "r", "title": "t", "body": "b"}
            )
            assert not result.is_error, result
            pending = structured(result)
            assert pending["status"] == "PENDING_APPROVAL", pending
            assert pending["approval"].startswith("apr_")
            assert pending["poll_url"].endswith(f"/api/approvals/{pending['approval']}/result")
            assert world.receipt(pending["receipt"])["status"] == "PENDING_APPROVAL"

    run(body)


def test_list_changed_after_a_rebuild_adds_a_row(world: World, transport: str):
    async def body():
        async with connect(world, transport, "full") as c:
            before, _ = await c.all_tools()
            assert "PARROT_REPEAT" not in {t.name for t in before}
            if transport == "http":
                # Give the SDK's GET stream a moment to open; a change before it opens is sent
                # when it does, so this only keeps the test about the live stream.
                await anyio.sleep(0.5)
            assert not c.list_changed.is_set()
            await anyio.to_thread.run_sync(world.add_row, "PARROT_REPEAT", "Repeat the words back.")
            with anyio.fail_after(30):
                await c.list_changed.wait()
            after, _ = await c.all_tools()
            assert "PARROT_REPEAT" in {t.name for t in after}
            assert len(after) == len(before) + 1
            # The new row has no input_schema: its one argument is the `body` string.
            new_tool = next(t for t in after if t.name == "PARROT_REPEAT")
            assert new_tool.input_schema["required"] == ["body"]
            said = structured(await c.session.call_tool("PARROT_REPEAT", {"body": "polly"}))
            assert said["output"] == "polly"
            assert world.receipt(said["receipt"])["key"] == "PARROT_REPEAT"

    run(body)
