"""The asyncio client against a real `tern dev`: the same calls, awaited,
and a watch that resumes across a crash."""

from __future__ import annotations

import asyncio

import pytest

from tern_client import AsyncTern, ConditionFailed


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 120))


def test_async_calls(node):
    async def main():
        async with AsyncTern(node.url) as tern:
            written = await tern.put("svc/api", "config", {"replicas": 3}, wait=True)
            assert (await tern.get("svc/api", "config", after=written.position)).value == {"replicas": 3}
            assert await tern.get("svc/api", "nothing") is None
            with pytest.raises(ConditionFailed):
                await tern.put("svc/api", "config", 1, if_absent=True)
            await tern.put("svc/web", "", 0)
            for i in range(12):
                last = await tern.put("svc/api", f"s{i:02}", i)
            assert [r.value async for r in tern.list("svc/api", prefix="s", limit=5, after=last.position)] == list(range(12))
            web = await tern.get("svc/web", strong=True)
            assert [r.pk async for r in tern.scan(prefix="svc/", limit=3, after=f"{last.position},{web.position.split(':', 1)[1]}")] == ["svc/api"] * 13 + ["svc/web"]
            many = await tern.get_many([("svc/api", "s01"), "missing"])
            assert [m and m.value for m in many] == [1, None]
            deleted = await tern.delete("svc/web", "", wait=True)
            assert await tern.get("svc/web", after=deleted.position) is None

    run(main())


def test_an_async_watch_resumes_across_a_crash(node):
    async def main():
        async with AsyncTern(node.url) as tern:
            await tern.put("flags", "a", 0, wait=True)
            watch = tern.watch("flags", backoff_initial_s=0.2, backoff_max_s=1.0)
            seen, kinds, synced = [], [], False
            async for event in watch:
                kinds.append(event.type)
                if event.type == "synced" and not synced:
                    synced = True
                    for i in range(3):
                        await tern.put("flags", f"k{i}", i, wait=True)
                    await asyncio.get_running_loop().run_in_executor(None, node.restart)
                    async with AsyncTern(node.url) as after_restart:
                        for i in range(3, 6):
                            await after_restart.put("flags", f"k{i}", i, wait=True)
                if event.type == "put" and synced:
                    seen.append((event.record.sk, event.record.value))
                    if len(seen) == 6:
                        watch.close()
                        break
            assert seen == [(f"k{i}", i) for i in range(6)]
            assert "disconnected" in kinds and kinds.count("connected") >= 2, kinds
            assert watch.position is not None

    run(main())
