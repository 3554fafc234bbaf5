"""The secrets the product mints (tenant tokens, console session ids, CSRF tokens), in one
recognisable form: a kind prefix and 32 random bytes, URL-safe. The log renderer
(core/logs.py) blanks anything of this form wherever it appears in a line. Also the form of
the one outside key a newcomer pastes (an Anthropic API key), to tell it from a placeholder.

A tenant token also names its tenant (`wat_<tenant id>_<random>`), so a failed attempt with
it counts against that tenant's limit (storage/throttle.py): a guess that could match one of
the tenant's tokens has to name the tenant. Tokens made before this form (`wat_<random>`)
keep working and name no tenant.
"""

import re
import secrets

TENANT_TOKEN = "wat_"  # the admin API's and the console's key of one tenant
SESSION_ID = "wcs_"  # a console session, in its cookie
CSRF_TOKEN = "wcf_"  # a console form's token (and the sign-in form's double-submit cookie)
WEBHOOK_SECRET = "whsec_"  # an outbound webhook endpoint's signing secret (storage/webhooks.py)

# what the renderer blanks: a prefix above and at least 16 URL-safe characters
MINTED = re.compile(r"(?:w(?:at|cs|cf)|whsec)_[A-Za-z0-9_-]{16,}")
_RANDOM_CHARS = 43  # secrets.token_urlsafe(32)
_TENANT_TOKEN = re.compile(rf"wat_([1-9][0-9]{{0,9}})_[A-Za-z0-9_-]{{{_RANDOM_CHARS}}}")


# An Anthropic API key as Anthropic's console issues it: "sk-ant-" and a long URL-safe rest
# (README's placeholder "sk-ant-..." and .env's empty value are not one)
ANTHROPIC_KEY = "sk-ant-"
_ANTHROPIC_KEY = re.compile(r"sk-ant-[A-Za-z0-9_-]{20,}")


def looks_like_anthropic_key(value: str) -> bool:
    """Whether `value` has the form of a key of api.anthropic.com (a placeholder has not)."""
    return _ANTHROPIC_KEY.fullmatch(value.strip()) is not None


# A Graph API access token as Meta issues it (user and system-user tokens): "EAA" and a long
# alphanumeric rest (Meta, "Access Tokens"; the README's console set-up leaves a placeholder)
_GRAPH_TOKEN = re.compile(r"EAA[A-Za-z0-9]{20,}")
# What the secrets that leave this machine must look like, by variable (the rest: any value
# that is not a placeholder)
SECRET_FORMS: dict[str, re.Pattern[str]] = {
    "ANTHROPIC_API_KEY": _ANTHROPIC_KEY,
    "WHATSAPP_ACCESS_TOKEN": _GRAPH_TOKEN,
}
SECRET_EXAMPLES = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-… (about 100 letters, digits, - and _; Anthropic's "
                         "console, API keys)",
    "WHATSAPP_ACCESS_TOKEN": "EAA… (about 200 letters and digits; Meta Business Settings, "
                             "system users: docs/DEPLOY.md 1.3)",
}
# Words (whole, between non-alphanumerics) and marks that only a placeholder holds
_PLACEHOLDER_WORDS = frozenset({
    "placeholder", "changeme", "change", "replace", "your", "yours", "example", "dummy",
    "fake", "todo", "tbd", "none", "null"})
_PLACEHOLDER_MARKS = ("...", "…", "<", ">", "{", "}")
_WORD = re.compile(r"[A-Za-z0-9]+")


def is_real_secret(name: str, value: str) -> bool:
    """Whether `value` of the environment variable `name` can be a real secret: not empty, no
    placeholder word ("placeholder", "changeme", "your", "xxx"…, whole words) or mark ("...",
    "<…>"), and of the variable's form when SECRET_FORMS has one. The one check of the worker
    (refuses to start), the web process (says which are placeholders) and `wagent chat`."""
    value = value.strip()
    if not value or any(mark in value for mark in _PLACEHOLDER_MARKS):
        return False
    words = [word.lower() for word in _WORD.findall(value)]
    if any(word in _PLACEHOLDER_WORDS or set(word) == {"x"} for word in words):
        return False
    form = SECRET_FORMS.get(name)
    return form is None or form.fullmatch(value) is not None


def mint(kind: str) -> str:
    """A new secret of `kind` (one of the prefixes above): 256 random bits."""
    return kind + secrets.token_urlsafe(32)


def mint_tenant_token(tenant_id: int) -> str:
    """A new tenant token naming `tenant_id`."""
    return f"{TENANT_TOKEN}{tenant_id}_{secrets.token_urlsafe(32)}"


def tenant_named(token: str) -> int | None:
    """The tenant id a token of the current form names, else None (any other string)."""
    found = _TENANT_TOKEN.fullmatch(token)
    return int(found.group(1)) if found else None
