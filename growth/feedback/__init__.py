"""What mail providers tell us after sending: webhook authentication, bounce classification,
and events recorded once into the tenant's suppressions."""
