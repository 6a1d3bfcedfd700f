"""Agent cards: agents/<name>.md, Markdown with YAML front matter (the seed's card format)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.support.fsio import read_text
from nika_brain.support.schema import F, fields, name, str_list
from nika_brain.support.yamlsafe import MAX_BYTES, ByText, Doc, loads

TIERS = ("hot", "warm", "cold")
STATUSES = ("active", "draft", "deprecated", "retired")


def front_matter(path: Path, text: str | None = None) -> tuple[Doc, str]:
    """(YAML front matter, Markdown body) of a card-like file (its `text` when read already); line
    numbers stay file-relative."""
    if text is None:
        text = read_text(path, limit=MAX_BYTES)
    if not text.startswith("---\n"):
        raise BrainError("expected YAML front matter starting with '---'", file=str(path), line=1)
    end = text.find("\n---", 3)
    if end < 0:
        raise BrainError("front matter is not closed with '---'", file=str(path))
    # Keep line numbers right: a blank first line stands in for the opening '---'.
    doc = loads("\n" + text[4:end + 1], str(path))
    body = text[end + 4:].lstrip("-").lstrip("\n")
    return doc, body


@dataclass(frozen=True)
class AgentCard:
    name: str
    type: str
    context_tier: str
    status: str
    scope: str
    owner: str
    writer: str
    lifecycle: str
    triggers: tuple[str, ...]
    protocol: str
    receives_from: tuple[str, ...]
    sends_to: tuple[str, ...]
    zone_access: tuple[str, ...]
    signals: tuple[str, ...]
    body: str = ""


_SPEC = {
    "name": F(str, required=True, check=name),
    "type": F(str, required=True, choices=("agent", "protocol", "satellite")),
    "context_tier": F(str, required=True, choices=TIERS),
    "status": F(str, required=True, choices=STATUSES),
    "brain": F(dict, required=True),
}
_BRAIN_SPEC = {
    "version": F(int, default=1),
    "type": F(str, default="protocol"),
    "scope": F(str, required=True),
    "owner": F(str, required=True),
    "writer": F(str, required=True),
    "lifecycle": F(str, required=True),
    "read": F(str, default="full"),
    "triggers": F(list, default=[], check=str_list),
    "export": F(bool, default=False),
    "ipc": F(dict, required=True),
}
_IPC_SPEC = {
    "protocol": F(str, default="bsi-v3"),
    "receives_from": F(list, default=[], check=str_list),
    "sends_to": F(list, default=[], check=str_list),
    "zone_access": F(list, default=[], check=str_list),
    "signals": F(list, default=[], check=str_list),
}


def load_card_path(path: Path) -> AgentCard:
    return _CARDS.load(path)


def _card(path: Path, text: str) -> AgentCard:
    doc, body = front_matter(path, text)
    v = fields(doc, doc.data, (), _SPEC)
    b = fields(doc, v["brain"], ("brain",), _BRAIN_SPEC)
    i = fields(doc, b["ipc"], ("brain", "ipc"), _IPC_SPEC)
    if v["name"] != path.stem:
        raise doc.error(f"name does not match the file name ({path.stem})", "name")
    return AgentCard(v["name"], v["type"], v["context_tier"], v["status"], b["scope"], b["owner"],
                     b["writer"], b["lifecycle"], tuple(b["triggers"]), i["protocol"],
                     tuple(i["receives_from"]), tuple(i["sends_to"]), tuple(i["zone_access"]),
                     tuple(i["signals"]), body)


_CARDS: ByText["AgentCard"] = ByText(_card)  # a launch loads the step's card at every step


def load_card(brain: Brain, card: str) -> AgentCard:
    if name(card):
        raise BrainError(f"not a valid agent name: {card!r}")
    path = brain.agents_dir / f"{card}.md"
    if not path.is_file():
        raise BrainError(f"no agent card agents/{card}.md")
    return load_card_path(path)


def list_cards(brain: Brain) -> list[AgentCard]:
    if not brain.agents_dir.is_dir():
        return []
    return [load_card_path(p) for p in sorted(brain.agents_dir.glob("*.md"))]
