"""HTML rendering: one Jinja environment, autoescaped, built once per app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

TEMPLATE_DIR = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"


class Pages:
    def __init__(self, service_name: str, extra_template_dirs: tuple[Path, ...] = ()) -> None:
        self._env = Environment(
            loader=FileSystemLoader([TEMPLATE_DIR, *extra_template_dirs]),
            autoescape=select_autoescape(default=True),
            auto_reload=False,
        )
        self._service_name = service_name

    def render(self, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self._env.get_template(template).render(service_name=self._service_name, **context)
        return HTMLResponse(html, status_code=status_code)

    def message(
        self,
        title: str,
        message: str,
        *,
        status_code: int = 200,
        link_href: str | None = None,
        link_text: str | None = None,
    ) -> HTMLResponse:
        return self.render(
            "message.html",
            status_code=status_code,
            title=title,
            message=message,
            link_href=link_href,
            link_text=link_text,
        )
