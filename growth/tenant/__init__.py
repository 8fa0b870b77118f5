"""The tenants' opt-out UI under /app/: a member of an account manages its suppression list and
looks addresses up. Every page is scoped by membership (growth.Membership)."""
