"""The operators' Django admin. Non-superusers see and act only on the accounts they are members
of (growth.Membership); every status change goes through the engine's managers or services.

Django's admin imports this after the admins of the apps listed before growth (auth, axes)."""

import growth.admin.destinations  # registers Destination and MailDomain
import growth.admin.domains  # noqa: F401 - registers SendingDomain
from growth.admin import audience, campaigns, feedback, limits, sends, workers  # noqa: F401 - registers
from growth.admin.other_apps import make_every_admin_ours
from growth.admin.widgets import tolerant_autocomplete_view

make_every_admin_ours()
tolerant_autocomplete_view()
