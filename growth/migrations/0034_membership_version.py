"""growth_memberships.version: the version of what the membership's change page shows, which an
operator's save must name to be saved (growth.admin.membership_edits: a form loaded before another
save is refused, not written over it). A constant default: adding it rewrites nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0033_sending_domain_verified'),
    ]

    operations = [
        migrations.AddField(
            model_name='membership',
            name='version',
            field=models.PositiveIntegerField(db_default=1, editable=False),
        ),
    ]
