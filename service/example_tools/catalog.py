"""Example tools: one free, three paid (see `service/billing/default_plans.toml`)."""

from __future__ import annotations

import math
import re
import sqlite3
from collections import Counter
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from service.paywall.toolset import ToolSet

tools = ToolSet()

MAX_TEXT_CHARACTERS = 100_000


class TextStats(BaseModel):
    characters: int
    words: int
    lines: int
    top_words: list[tuple[str, int]]


@tools.free(description="Count characters, words and lines, and list the most frequent words.")
def text_stats(
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARACTERS)],
    top: Annotated[int, Field(ge=0, le=50)] = 5,
) -> TextStats:
    words = re.findall(r"[\w']+", text.lower())
    return TextStats(
        characters=len(text),
        words=len(words),
        lines=len(text.splitlines()) or (1 if text else 0),
        top_words=Counter(words).most_common(top),
    )


@tools.paid("pro", "team", description="Draw a horizontal bar chart of numbers as plain text.")
def ascii_chart(
    values: Annotated[list[float], Field(min_length=1, max_length=100)],
    labels: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=100)] | None = None,
    width: Annotated[int, Field(ge=5, le=200)] = 40,
) -> str:
    names = labels or [str(index + 1) for index in range(len(values))]
    if len(names) != len(values):
        raise ToolError("labels and values must have the same length")
    peak = max(abs(value) for value in values) or 1.0
    label_width = max(len(name) for name in names)
    rows = []
    for name, value in zip(names, values, strict=True):
        bar = "#" * round(abs(value) / peak * width)
        rows.append(f"{name.rjust(label_width)} | {bar} {value:g}")
    return "\n".join(rows)


class PasswordAudit(BaseModel):
    length: int
    character_classes: list[str]
    estimated_entropy_bits: float
    problems: list[str]
    verdict: str


COMMON_PASSWORDS = frozenset(
    {"password", "123456", "qwerty", "letmein", "admin", "welcome", "iloveyou", "monkey"}
)


@tools.paid("team", description="Audit a password's strength locally; the password never leaves this server.")
def password_audit(password: Annotated[str, Field(max_length=256)]) -> PasswordAudit:
    classes = {
        "lowercase": r"[a-z]",
        "uppercase": r"[A-Z]",
        "digits": r"[0-9]",
        "symbols": r"[^A-Za-z0-9]",
    }
    present = [name for name, pattern in classes.items() if re.search(pattern, password)]
    alphabet = {"lowercase": 26, "uppercase": 26, "digits": 10, "symbols": 33}
    pool = sum(alphabet[name] for name in present) or 1
    entropy = round(len(password) * math.log2(pool), 1)
    problems = []
    if len(password) < 12:
        problems.append("shorter than 12 characters")
    if password.lower() in COMMON_PASSWORDS:
        problems.append("one of the most common passwords")
    if re.search(r"(.)\1\1", password):
        problems.append("repeats a character three times in a row")
    if re.search(r"(0123|1234|2345|3456|4567|5678|6789|abcd|qwer)", password.lower()):
        problems.append("contains a keyboard or number sequence")
    verdict = "strong" if entropy >= 70 and not problems else "weak" if entropy < 40 or problems else "fair"
    return PasswordAudit(
        length=len(password),
        character_classes=present,
        estimated_entropy_bits=entropy,
        problems=problems,
        verdict=verdict,
    )


SAMPLE_SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT UNIQUE, country TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                     total_cents INTEGER, created_at TEXT);
CREATE INDEX orders_customer ON orders(customer_id);
"""


@tools.paid(
    "pro",
    "team",
    description=(
        "Explain how SQLite would run a query against a sample shop schema "
        "(customers, orders): the query plan, and whether indexes are used."
    ),
)
def sql_explain(query: Annotated[str, Field(max_length=4000)]) -> str:
    if not query.lstrip().lower().startswith(("select", "with")):
        raise ToolError("only SELECT queries can be explained")
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(SAMPLE_SCHEMA)
        rows = connection.execute(f"EXPLAIN QUERY PLAN {query}").fetchall()
    except sqlite3.Error as exc:
        raise ToolError(f"SQLite cannot plan this query: {exc}") from exc
    finally:
        connection.close()
    lines = [f"{'  ' * (depth_of(rows, row[1]))}- {row[3]}" for row in rows]
    uses_index = any("USING INDEX" in row[3] or "USING INTEGER PRIMARY KEY" in row[3] for row in rows)
    verdict = "uses an index" if uses_index else "scans without an index"
    return "\n".join([*lines, "", f"Verdict: {verdict}."])


def depth_of(rows: list[tuple[int, int, int, str]], parent: int) -> int:
    parents = {row[0]: row[1] for row in rows}
    depth = 0
    while parent in parents:
        depth += 1
        parent = parents[parent]
    return depth
