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
