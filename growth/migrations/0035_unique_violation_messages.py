"""What a form is told of a membership or a segment the database already holds (the constraints'
own messages: Django's default named only the constraint). Nothing in the database changes."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0034_membership_version'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterConstraint(
            model_name='membership',
            name='membership_unique',
            constraint=models.UniqueConstraint(models.F('user'), models.F('account'), name='membership_unique', violation_error_message='This user is a member of this account already: change that membership.'),
        ),
        migrations.AlterConstraint(
            model_name='segment',
            name='segment_unique_name',
            constraint=models.UniqueConstraint(models.F('account'), models.F('name'), name='segment_unique_name', violation_error_message='This account has a segment of this name already.'),
        ),
    ]
