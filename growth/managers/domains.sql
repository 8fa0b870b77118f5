-- claims --
-- The sending domains of these names (a From domain and its parents) that bear on whether this
-- account may send from them: its own, the platform's, and those another account has verified
SELECT account_id, domain, verified_at IS NOT NULL AS verified
  FROM growth_sending_domains
 WHERE domain = ANY(%(names)s::text[])
   AND (account_id IS NULL OR account_id = %(account_id)s OR verified_at IS NOT NULL);

-- usable --
-- The domains this account may send from without more ado: its verified ones, the platform's
SELECT domain, account_id IS NULL AS platform
  FROM growth_sending_domains
 WHERE account_id IS NULL
    OR (account_id = %(account_id)s AND verified_at IS NOT NULL)
 ORDER BY account_id IS NULL, domain;

-- unverified --
-- This account's sending domains that still await their proof in DNS
SELECT domain
  FROM growth_sending_domains
 WHERE account_id = %(account_id)s
   AND verified_at IS NULL
 ORDER BY domain;

-- record_check --
-- The DNS was read for this row's key: verified (now) or not (NULL), only if the row still holds
-- the owner, domain, selector and key it was read for (a change meanwhile cleared it already)
UPDATE growth_sending_domains
   SET verified_at = CASE WHEN %(verified)s THEN now() END
 WHERE id = %(id)s
   AND account_id IS NOT DISTINCT FROM %(account_id)s
   AND domain = %(domain)s
   AND selector = %(selector)s
   AND algorithm = %(algorithm)s
   AND private_key = %(private_key)s
RETURNING verified_at;
