"""``preagg demo --serve`` (``make dashboard``): after the demo, a worker, live traffic and the dashboard.

Everything keeps running until Ctrl-C: the dashboard's real-time chart moves as the
generated hits (dated now) are committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time

from pipeline.kafka.producer import EventProducer
from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess


def free_or(port: int, host: str) -> int:
    """``port`` when it can be bound on ``host``, else 0 (any free one)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return 0
    return port


async def live(settings: Settings, rate: int = 20) -> None:
    """A worker, ``rate`` generated hits per second and ``preagg serve``, until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    worker = WorkerProcess(settings, "dashboard-worker").start()
    server = ServeProcess(settings, port=free_or(settings.serve_port, settings.serve_bind)).start()
    print(f"\n== dashboard  {server.url}")
    print(f"   live traffic: {rate} hits/s dated now; the API at {server.url}openapi.json")
    print("   Ctrl-C stops the traffic, the worker, the server and the services", flush=True)
    try:
        async with EventProducer(settings, settings.topic("hits"), 50) as producer:
            seed = 1_000
            while not stop.is_set():
                seed += 1
                traffic = generate(
                    rate, end=time.time(), days=1 / 1440, seed=seed, late_share=0, bad_share=0, props=True
                )
                for line, key in traffic.lines:
                    await producer.send_raw(line, key)
                await producer.flush()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1)
        print("\nstopping ...", flush=True)
    finally:
        server.terminate()
        worker.terminate()
