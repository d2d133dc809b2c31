"""Several simulated providers in one process, plus an optional shared control port."""

from __future__ import annotations

from aiohttp import web

from tailgate.sim.control import add_control_routes
from tailgate.sim.provider import ProviderSpec, SimProvider


class SimCluster:
    """Start and stop a set of :class:`SimProvider`; ``providers[name].url`` after ``start()``."""

    def __init__(self, specs: list[ProviderSpec], *, host: str = "127.0.0.1", control_port: int | None = None):
        self.providers = {spec.name: SimProvider(spec) for spec in specs}
        self.host = host
        self.control_port = control_port
        self._control: web.AppRunner | None = None
        self.control_url: str | None = None

    async def start(self) -> None:
        try:
            for provider in self.providers.values():
                await provider.start()
            if self.control_port is not None:
                app = web.Application()
                for name, provider in self.providers.items():
                    add_control_routes(app, provider, prefix=f"/sim/{name}")
                self._control = web.AppRunner(app, access_log=None)
                await self._control.setup()
                site = web.TCPSite(self._control, self.host, self.control_port, reuse_address=True)
                await site.start()
                port = self.control_port
                if port == 0:
                    port = site.port
                self.control_url = f"http://{self.host}:{port}"
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for provider in self.providers.values():
            await provider.stop()
        if self._control is not None:
            await self._control.cleanup()
            self._control = None

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
