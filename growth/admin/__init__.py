"""The operators' Django admin. Non-superusers see and act only on the accounts they are members
of (growth.Membership); every status change goes through the engine's managers or services."""

import growth.admin.destinations  # registers Destination and MailDomain
import growth.admin.domains  # noqa: F401 - registers SendingDomain
from growth.admin import audience, campaigns, feedback, limits, sends, workers  # noqa: F401 - registers
