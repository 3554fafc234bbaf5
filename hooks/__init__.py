"""Outbound webhooks to the business's own systems: the signature (`hooks.signature`) and the
one HTTP call that delivers an event (`hooks.client`), guarded against SSRF at connect time.
What is sent when, and the retries, live in storage/webhooks.py and workers/webhooks.py."""
