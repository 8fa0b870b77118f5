"""Who receives mail: address validation, address lists (CSV and pasted), imports, and a tenant's
view of its opt-outs."""
