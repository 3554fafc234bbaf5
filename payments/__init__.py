"""Payment providers behind one small interface (issue 48, docs/PAYMENTS.md): create a dynamic
Pix charge, verify the provider's webhook, fetch a payment to confirm it."""
