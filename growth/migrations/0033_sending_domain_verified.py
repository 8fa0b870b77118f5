"""growth_sending_domains.verified_at: when the DNS was found publishing the domain's key, its
owner's proof that the domain is theirs (growth.deliverability.sender_domains). Every existing
domain starts unverified. A trigger clears it on any change of what was proved (the owner, the
domain, the selector, the key), whoever writes the row: a key pasted after the check proves
nothing."""

from django.db import migrations, models

UNVERIFY = """
CREATE FUNCTION growth_sending_domain_unverified() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.verified_at := NULL;
    RETURN NEW;
END $$;

CREATE TRIGGER growth_sending_domains_unverified BEFORE UPDATE ON growth_sending_domains
    FOR EACH ROW WHEN (OLD.account_id IS DISTINCT FROM NEW.account_id
                       OR OLD.domain IS DISTINCT FROM NEW.domain
                       OR OLD.selector IS DISTINCT FROM NEW.selector
                       OR OLD.algorithm IS DISTINCT FROM NEW.algorithm
                       OR OLD.private_key IS DISTINCT FROM NEW.private_key)
    EXECUTE FUNCTION growth_sending_domain_unverified();
"""

KEEP = """
DROP TRIGGER growth_sending_domains_unverified ON growth_sending_domains;
DROP FUNCTION growth_sending_domain_unverified();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0032_account_version'),
    ]

    operations = [
        migrations.AddField(
            model_name='sendingdomain',
            name='verified_at',
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(UNVERIFY, reverse_sql=KEEP),
    ]
