"""What the background prompts ask for, and how their answers are read (issue 42 item 4): the
facts extraction answers through a forced tool whose input schema is the output's shape (so an
unparseable answer cannot happen), and the summary is written in the business's language within
its word limit. Pure; the job shells are workers/facts.py and workers/compaction.py.
"""

import json
import re
from typing import Any

from agent.tools.facts_rules import Proposal
from storage.fact_keys import FactKey

Block = dict[str, Any]
RECORD_FACTS = "record_facts"
SUMMARY_MAX_WORDS = 200  # the summary's limit, said in its prompt and kept by `within_words`
LANGUAGE_NAMES = {"pt-BR": "Brazilian Portuguese", "en": "English"}


def language_name(code: str) -> str:
    """"pt-BR" -> "Brazilian Portuguese": a prompt names the language, not its tag."""
    return LANGUAGE_NAMES.get(code, LANGUAGE_NAMES.get(code.split("-")[0], code))


def within_words(text: str, limit: int = SUMMARY_MAX_WORDS) -> str:
    """`text` cut after its `limit`-th word (line breaks before it kept), with " …" when cut;
    as it is when it fits."""
    words = list(re.finditer(r"\S+", text))
    if len(words) <= limit:
        return text
    return text[:words[limit - 1].end()].rstrip() + " …"


def facts_schema(keys: dict[str, FactKey]) -> dict[str, Any]:
    """JSON schema of the extraction output; the key enumerates the tenant's keys."""
    item = {"type": "object", "additionalProperties": False,
            "required": ["key", "value", "source_message_id", "stated"],
            "properties": {"key": {"type": "string", "enum": sorted(keys)},
                           "value": {"type": "string"},
                           "source_message_id": {"type": "integer"},
                           "stated": {"type": "boolean"}}}
    return {"type": "object", "additionalProperties": False, "required": ["facts"],
            "properties": {"facts": {"type": "array", "items": item}}}


def facts_tools(keys: dict[str, FactKey]) -> dict[str, Any]:
    """The extraction request's `tools` and `tool_choice`: the one tool the model must call,
    its input the output's shape (Anthropic: tool_choice {"type": "tool"} forces the call)."""
    tool = {"name": RECORD_FACTS, "description": "Record the facts found about the customer "
            "(an empty list when none qualifies).", "input_schema": facts_schema(keys)}
    return {"tools": [tool], "tool_choice": {"type": "tool", "name": RECORD_FACTS}}


def parse_facts(content: list[Block]) -> list[Proposal]:
    """The proposals of an extraction response's content (blocks as `loop.dump_content` gives
    them): the input of its record_facts call; a recording made before issue 42 answers
    with the JSON as text, read the same way. Raises ValueError when neither is there or the
    shape is not the agreed one."""
    for block in content:
        if block.get("type") == "tool_use" and block.get("name") == RECORD_FACTS:
            return proposals_of(block.get("input"))
    texts = [str(b.get("text", "")) for b in content if b.get("type") == "text"]
    if not texts:
        raise ValueError(f"no {RECORD_FACTS} call in the extraction response")
    return proposals_of(json.loads(texts[0]))


def proposals_of(data: Any) -> list[Proposal]:
    """{"facts": [...]} -> proposals; raises ValueError when it is not that shape."""
    if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
        raise ValueError("expected {\"facts\": [...]}")
    proposals = []
    for item in data["facts"]:
        if not isinstance(item, dict):
            raise ValueError("a fact is not an object")
        source = item.get("source_message_id")
        value = str(item.get("value", "")).encode("utf-8", "replace").decode("utf-8")
        proposals.append(Proposal(key=str(item.get("key", "")), value=value,
                                  source_message_id=source if isinstance(source, int) else None,
                                  stated=item.get("stated") is True))
    return proposals
