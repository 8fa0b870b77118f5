/*
 * The send protocol of growth/managers/*.sql as a Promela model, checked exhaustively by spin
 * (`make verify`; verify/check.py drives it, verify/README.md explains the bounds).
 *
 * One campaign of ROWS recipients, built already (the build's uniqueness is the stateful test's,
 * tests/test_protocol_stateful.py). WORKERS run_sender processes, the recovery racing them, an
 * operator (pause, resume, cancel, retry an unknown row, mark it delivered), recipients opting
 * out at any moment, and time letting leases run out. Each atomic step is one SQL statement,
 * named by its block in growth/managers/*.sql; a worker may crash between any two of them (its
 * memory is lost; it comes back under a new worker id, as a restarted process does).
 *
 * A worker claims one row at a time. Every statement of the protocol decides row by row (its
 * conditions are on the row, its campaign and the row's address), so a batch behaves as its rows
 * would one after the other; two workers holding one row each cover two batches in flight.
 *
 * Compile-time choices: -DIDEMPOTENT (the receiver de-duplicates on the job id: rows are handed
 * over by the claim, outcomes are settled on the worker's settler thread), and one MUT_* flag
 * (verify/check.py --mutants) to show that the properties catch each known-bad change.
 *
 * Properties:
 *   P1 at most one delivery per job id between two retries by an operator (who accepts a
 *      possible duplicate when retrying an 'unknown' row); with an idempotent receiver, a
 *      delivery is the first acceptance of the key
 *   P2 no row is 'sent' without a delivery (or an operator's "mark delivered")
 *   P3 no delivery to an address whose opt-out committed before the row's last check before
 *      the wire (the hand-over with a plain receiver, the `blocked` read with an idempotent one)
 *   P4 'sending' => a lease
 *   P6 nobody but the recovery and the operator takes a row from the attempt that holds it:
 *      while that attempt is on the wire its row is not suppressed, failed or cancelled by
 *      another, and no late settle of an earlier attempt (by another worker or by the same
 *      one) overwrites the answer it got
 *   P5 (LTL `settles`, under weak fairness) once crashes and stalls are over, every row reaches
 *      a final state (sent, suppressed, failed, unknown, cancelled)
 *
 * Abstracted: the retry horizon. A transient row is retried until SENDER_RETRY_FOR after its
 * first attempt; attempts take time, so the model bounds them instead (MAX_ATTEMPTS). A throttle
 * ("slow down") settles as a transient whose attempt is given back (attempts - 1): not modelled
 * here, where attempts alone bound the retries; the stateful test (tests/test_protocol_stateful.py)
 * runs it against the real SQL, P6 included, since giving an attempt back is what could let a
 * late settle of an earlier attempt match again.
 *
 * Not modelled, on purpose: a transport outcome that lies (an SMTP connection dropped after the
 * relay accepted the message but before its reply is read looks transient: with a plain
 * receiver the retry is a duplicate that no sender can rule out; see the README).
 */

#ifndef ROWS
#define ROWS 2
#endif
#ifndef WORKERS
#define WORKERS 2
#endif
#ifndef MAX_CRASHES
#define MAX_CRASHES 1
#endif
#define MAX_ATTEMPTS 2
#define MAX_STALLS 1     /* leases that run out under a live, slow worker */
#define MAX_RETRIES 1    /* an operator's retries of one unknown row */
#define NOBODY 0         /* claimed_by = '' */
#define NONE 255         /* a worker holds no row */
#define OPERATOR 1       /* who holds the campaign row's lock (lock_campaign) */

#ifdef IDEMPOTENT
#define RECEIVER_DEDUPS 1
#else
#define RECEIVER_DEDUPS 0
#endif

/* Known-bad changes; verify/check.py turns each on alone and expects a counterexample. */
#ifndef MUT_SETTLE_NO_OWNER            /* settle without `claimed_by = %(worker_id)s` */
#define MUT_SETTLE_NO_OWNER 0
#endif
#ifndef MUT_HANDOVER_NO_OWNER          /* hand_over without `claimed_by = %(worker_id)s` */
#define MUT_HANDOVER_NO_OWNER 0
#endif
#ifndef MUT_CLAIM_IGNORES_OPTOUT       /* claim without its `blocked` CTE */
#define MUT_CLAIM_IGNORES_OPTOUT 0
#endif
#ifndef MUT_CHECK_IGNORES_OPTOUT       /* hand_over (plain) / blocked (idempotent) never blocks */
#define MUT_CHECK_IGNORES_OPTOUT 0
#endif
#ifndef MUT_SENT_BEFORE_WIRE           /* the write-up's order: 'sent' committed before the wire */
#define MUT_SENT_BEFORE_WIRE 0
#endif
#ifndef MUT_RECOVER_HANDED_TO_QUEUED   /* recover_expired requeues handed-over rows, plain too */
#define MUT_RECOVER_HANDED_TO_QUEUED 0
#endif
#ifndef MUT_SETTLE_ANY_ATTEMPT         /* settle without `attempts = r.attempt`: by worker only */
#define MUT_SETTLE_ANY_ATTEMPT 0
#endif
#ifndef MUT_UNLOCKED_CAMPAIGN_READ     /* settle/recover read the campaign without locking it */
#define MUT_UNLOCKED_CAMPAIGN_READ 0
#endif

mtype = { QUEUED, SENDING, SENT, SUPPRESSED, FAILED, UNKNOWN, CANCELLED };  /* growth_sends.status */
mtype = { C_SENDING, C_PAUSED, C_SENT, C_CANCELLED };                       /* growth_campaigns.status */
mtype = { O_NONE, O_SENT, O_TRANSIENT, O_PERMANENT };                       /* what the transport said */

/* growth_sends, one row per recipient */
mtype status[ROWS] = QUEUED;
byte claimed_by[ROWS];      /* a worker id, or NOBODY */
bit handed[ROWS];           /* handed_over_at IS NOT NULL */
bit leased[ROWS];           /* lease_expires_at IS NOT NULL */
bit expired[ROWS];          /* lease_expires_at < now() */
byte attempts[ROWS];
bit optout[ROWS];           /* the tenant's suppression of the address has committed */
/* growth_campaigns, and who holds its row lock (lock_campaign, lock_campaigns_of_unknown) */
mtype campaign = C_SENDING;
byte campaign_lock;

/* the world outside the database, and what the properties are about */
bit accepted[ROWS];         /* the receiver has the message (an idempotent one absorbs repeats) */
bit refused[ROWS];          /* the receiver refused it for good (it says so to every attempt) */
bit current_ok[ROWS];       /* the receiver accepted the attempt that now holds the row */
byte fresh[ROWS];           /* messages delivered since the operator's last retry of the row */
byte retried[ROWS];         /* an operator's retries */
bit marked[ROWS];           /* an operator's "mark delivered" */
byte holders[ROWS];         /* live workers with the row in hand (or its settle waiting) */
byte crashes, stalls;
bit paused_once, contained_once, unrenderable_once;

/* a settle waiting on each worker's settler thread (idempotent receiver; depth 1) */
byte pending_row[WORKERS] = NONE;
mtype pending_outcome[WORKERS];
byte pending_by[WORKERS];
byte pending_attempt[WORKERS];

byte k;                     /* loop index inside atomic steps only: 0 between steps */

/* After every step: the safety properties, then forget what no statement reads again in the
   row's new status (claimed_by and handed_over_at outside 'sending'/'unknown', attempts once
   final), so that rows that differ only there count as one state. */
inline properties() {
    k = 0;
    do
    :: k < ROWS ->
       assert(fresh[k] <= 1);                                                /* P1 */
       assert(status[k] != SENT || accepted[k] || marked[k]);                /* P2 */
       assert(status[k] != SENDING || leased[k]);                            /* P4 */
       if
       :: status[k] == SENDING -> skip
       :: status[k] == UNKNOWN -> handed[k] = 0
       :: status[k] == QUEUED -> handed[k] = 0; claimed_by[k] = NOBODY; current_ok[k] = 0
       :: else -> handed[k] = 0; claimed_by[k] = NOBODY; attempts[k] = 0; current_ok[k] = 0
       fi;
       k++
    :: else -> k = 0; break
    od
}

#define FINAL(r) (status[r] == SENT || status[r] == SUPPRESSED || status[r] == FAILED || \
                  status[r] == UNKNOWN || status[r] == CANCELLED)

/* one option per row of an `if`: the row a statement picks (ORDER BY/SKIP LOCKED abstracted
   to "any row that qualifies") */
#if ROWS == 1
#define EACH_ROW(cond, r) :: cond(0) -> r = 0
#elif ROWS == 2
#define EACH_ROW(cond, r) :: cond(0) -> r = 0 :: cond(1) -> r = 1
#else
#define EACH_ROW(cond, r) :: cond(0) -> r = 0 :: cond(1) -> r = 1 :: cond(2) -> r = 2
#endif

/* -- settle (sends.sql) -- only a row still in this claim's hands (this worker, this attempt);
   one that went 'unknown' while it was slow, and that is now known sent, becomes 'sent'.
   `seen`: the campaign's status as the statement read it (under the settle's FOR SHARE lock, the
   current one). */
inline settle(r, outcome, who, attempt, seen) {
    printf("W%d settle row %d: %e, attempt %d\n", who, r, outcome, attempt);
    if
    :: (claimed_by[r] == who || MUT_SETTLE_NO_OWNER) &&
       (attempts[r] == attempt || MUT_SETTLE_ANY_ATTEMPT) &&
       (status[r] == SENDING || (status[r] == UNKNOWN && outcome == O_SENT)) ->
       assert(!current_ok[r] || outcome == O_SENT);                          /* P6 */
       if
       :: outcome == O_SENT -> status[r] = SENT
       :: outcome == O_TRANSIENT && seen == C_CANCELLED -> status[r] = CANCELLED
       :: outcome == O_TRANSIENT && seen != C_CANCELLED && attempts[r] < MAX_ATTEMPTS ->
          status[r] = QUEUED
       :: else -> status[r] = FAILED
       fi;
       leased[r] = 0; expired[r] = 0;
       printf("  -> %e\n", status[r])
    :: else -> printf("  -> not this claim's any more: untouched\n")
    fi
}

#define CLAIMABLE(r) (campaign == C_SENDING && status[r] == QUEUED)

/* A crash point: the process is killed; it restarts under a new worker id with nothing in hand
   (a settle still waiting on its thread dies with it). */
#define CRASH \
    atomic { crashes < MAX_CRASHES -> crashes++; \
             if :: r != NONE -> holders[r]-- :: else -> skip fi; \
             if :: pending_row[slot] != NONE -> holders[pending_row[slot]]-- :: else -> skip fi; \
             printf("W%d killed (kill -9); restarts as W%d\n", me, WORKERS + crashes); \
             me = WORKERS + crashes; \
             r = NONE; outcome = O_NONE; blocked = 0; clean = 0; seen = 0; epoch = 0; attempt = 0; \
             pending_row[slot] = NONE; pending_outcome[slot] = 0; pending_by[slot] = 0; \
             pending_attempt[slot] = 0 }; \
    goto end_idle

proctype Worker(byte slot) {
    byte me = slot + 1;
    byte r = NONE;
    mtype outcome = O_NONE;
    mtype seen;
    bit blocked, clean;
    byte epoch;   /* the operator's retries of the row when this attempt began */
    byte attempt; /* the row's attempts as the claim returned them */

end_idle:
    /* -- claim (sends.sql) -- the opt-out re-checked in the same statement; with an
       idempotent receiver the claim hands the row over too */
    atomic {
        if
        EACH_ROW(CLAIMABLE, r)
        fi;
        claimed_by[r] = me;
        if
        :: optout[r] && !MUT_CLAIM_IGNORES_OPTOUT -> status[r] = SUPPRESSED; handed[r] = 0;
           printf("W%d claim row %d -> suppressed (opted out)\n", me, r);
           r = NONE
        :: else -> status[r] = SENDING; attempts[r]++; leased[r] = 1; expired[r] = 0;
                   handed[r] = RECEIVER_DEDUPS; epoch = retried[r]; attempt = attempts[r];
                   current_ok[r] = 0; holders[r]++;
                   printf("W%d claim row %d -> sending, attempt %d\n", me, r, attempt)
        fi;
        properties();
        if
        :: r == NONE -> goto end_idle
        :: else -> skip
        fi
    };
    if
    :: CRASH
    /* The campaign cannot be rendered (a tenant's template or sender): the engine contains it. */
    :: atomic {   /* -- pause (campaigns.sql) -- */
           !contained_once && campaign_lock == 0 -> contained_once = 1;
           if :: campaign == C_SENDING -> campaign = C_PAUSED :: else -> skip fi;
           printf("W%d cannot render the campaign: pause -> %e\n", me, campaign)
       };
       if :: CRASH :: skip fi;
       atomic {   /* -- release (sends.sql) -- locks the campaign row first, as cancel does */
           campaign_lock == 0 ->
           if
           :: status[r] == SENDING && claimed_by[r] == me && (!handed[r] || RECEIVER_DEDUPS) ->
              if
              :: campaign == C_CANCELLED -> status[r] = CANCELLED
              :: else -> status[r] = QUEUED
              fi;
              attempts[r]--; leased[r] = 0; expired[r] = 0; handed[r] = 0; claimed_by[r] = NOBODY
           :: else -> skip
           fi;
           printf("W%d release row %d -> %e\n", me, r, status[r]);
           properties();
           holders[r]--; r = NONE; epoch = 0; attempt = 0;
           goto end_idle
       }
    /* This recipient's message cannot be rendered: refused for good, settled without the wire. */
    :: atomic { !unrenderable_once -> unrenderable_once = 1; outcome = O_PERMANENT; epoch = 0;
                printf("W%d cannot render row %d\n", me, r) };
       goto settle_it
    :: skip
    fi;
#ifdef IDEMPOTENT
    /* -- blocked (sends.sql) -- a read: does an opt-out now block the row? */
    atomic {
        blocked = optout[r] && !MUT_CHECK_IGNORES_OPTOUT;
        clean = !optout[r];
        printf("W%d blocked read, row %d: blocked=%d\n", me, r, blocked)
    };
    if :: CRASH :: skip fi;
    if
    :: blocked ->
       atomic {   /* -- hand_over (sends.sql) -- of the blocked rows only: suppressed if still ours */
           if
           :: status[r] == SENDING && (claimed_by[r] == me || MUT_HANDOVER_NO_OWNER) ->
              status[r] = SUPPRESSED; handed[r] = 0; attempts[r]--; leased[r] = 0; expired[r] = 0
           :: else -> skip
           fi;
           printf("W%d hand_over row %d (blocked) -> %e\n", me, r, status[r]);
           properties();
           holders[r]--; r = NONE; blocked = 0; clean = 0; epoch = 0; attempt = 0;
           goto end_idle
       }
    :: else -> skip
    fi;
#else
    /* -- hand_over (sends.sql) -- committed before the transport sees the row, the opt-out
       checked once more; only a row still ours */
    atomic {
        clean = !optout[r];
        if
        :: status[r] == SENDING && (claimed_by[r] == me || MUT_HANDOVER_NO_OWNER) ->
           if
           :: optout[r] && !MUT_CHECK_IGNORES_OPTOUT ->
              status[r] = SUPPRESSED; handed[r] = 0; attempts[r]--; leased[r] = 0; expired[r] = 0;
              blocked = 1
           :: else ->
              handed[r] = 1;
              if
              :: MUT_SENT_BEFORE_WIRE -> status[r] = SENT; leased[r] = 0; expired[r] = 0
              :: else -> skip
              fi
           fi
        :: else -> blocked = 1   /* not ours any more: not sent by us */
        fi;
        printf("W%d hand_over row %d -> %e\n", me, r, status[r]);
        properties();
        if
        :: blocked -> holders[r]--; r = NONE; blocked = 0; clean = 0; epoch = 0; attempt = 0; goto end_idle
        :: else -> skip
        fi
    };
#endif
    if :: CRASH :: skip fi;
    /* the transport: the message accepted, refused for now, or refused for good */
    atomic {
        assert(!(claimed_by[r] == me && attempts[r] == attempt) ||                /* P6 */
               (status[r] != SUPPRESSED && status[r] != FAILED && status[r] != CANCELLED));
        if
        :: RECEIVER_DEDUPS && accepted[r] -> outcome = O_SENT   /* absorbed: the first answer again */
        :: refused[r] && !(RECEIVER_DEDUPS && accepted[r]) -> outcome = O_PERMANENT
        :: !refused[r] && !(RECEIVER_DEDUPS && accepted[r]) ->
           if
           :: outcome = O_SENT; assert(clean);                               /* P3 */
              accepted[r] = 1;
              if   /* an attempt begun before the operator's retry is the duplicate accepted */
              :: epoch == retried[r] -> fresh[r]++
              :: else -> skip
              fi
           :: outcome = O_TRANSIENT
           :: outcome = O_PERMANENT; refused[r] = 1
           fi
        fi;
        if
        :: outcome == O_SENT && claimed_by[r] == me && attempts[r] == attempt -> current_ok[r] = 1
        :: else -> skip
        fi;
        printf("W%d transport row %d: %e (delivered since the last retry: %d)\n", me, r, outcome,
               fresh[r]);
        clean = 0; epoch = 0;
        properties()
    };
settle_it:
    if :: CRASH :: skip fi;
#ifdef IDEMPOTENT
    /* handed to the settler thread; the loop blocks while one settle already waits */
    atomic {
        pending_row[slot] == NONE ->
        pending_row[slot] = r; pending_outcome[slot] = outcome; pending_by[slot] = me;
        pending_attempt[slot] = attempt;
        r = NONE; outcome = O_NONE; attempt = 0;
        goto end_idle
    }
#else
#if MUT_UNLOCKED_CAMPAIGN_READ
    atomic { seen = campaign };   /* the statement's snapshot of the campaign */
    if :: CRASH :: skip fi;
#endif
    atomic {
        campaign_lock == 0 ->     /* settle's `campaign` CTE: FOR SHARE */
#if !MUT_UNLOCKED_CAMPAIGN_READ
        seen = campaign;
#endif
        settle(r, outcome, me, attempt, seen);
        properties();
        holders[r]--; r = NONE; outcome = O_NONE; seen = 0; attempt = 0;
        goto end_idle
    }
#endif
}

#ifdef IDEMPOTENT
/* The worker's settler thread: runs the waiting settle, unless its process was killed first. */
proctype Settler(byte slot) {
    mtype seen;
end:
    do
    :: atomic {
#if MUT_UNLOCKED_CAMPAIGN_READ
           pending_row[slot] != NONE -> seen = campaign   /* the statement's snapshot */
       };
       atomic {
           pending_row[slot] != NONE ->
#else
           pending_row[slot] != NONE && campaign_lock == 0 ->
           seen = campaign;   /* settle's `campaign` CTE: FOR SHARE */
#endif
           settle(pending_row[slot], pending_outcome[slot], pending_by[slot],
                  pending_attempt[slot], seen);
           properties();
           holders[pending_row[slot]]--; pending_row[slot] = NONE; pending_outcome[slot] = 0; pending_by[slot] = 0;
           pending_attempt[slot] = 0; seen = 0
       }
    od
}
#endif

#define RECOVERABLE(r) (status[r] == SENDING && expired[r] && campaign_lock == 0)
#define OPEN(r) (status[r] == QUEUED || status[r] == SENDING)
#if ROWS == 1
#define OPEN_ANY (OPEN(0))
#elif ROWS == 2
#define OPEN_ANY (OPEN(0) || OPEN(1))
#else
#define OPEN_ANY (OPEN(0) || OPEN(1) || OPEN(2))
#endif

/* Any worker's housekeeping, between its batches. */
proctype Recovery() {
    byte r = NONE;
end:
    do
    /* -- recover_expired (sends.sql) -- never handed over: queued again, the attempt not
       counted; handed over: retried with the same key for a receiver that de-duplicates, else
       'unknown' for an operator. In a cancelled campaign (read under `lock_campaigns_of_expired`)
       nothing is queued again: never handed over is 'cancelled', handed over 'unknown'. */
    :: atomic {
           if
           EACH_ROW(RECOVERABLE, r)
           fi;
           if
           :: !handed[r] ->
              if
              :: campaign == C_CANCELLED && !MUT_UNLOCKED_CAMPAIGN_READ -> status[r] = CANCELLED
              :: else -> status[r] = QUEUED
              fi;
              attempts[r]--
           :: handed[r] && (RECEIVER_DEDUPS || MUT_RECOVER_HANDED_TO_QUEUED) &&
              attempts[r] < MAX_ATTEMPTS &&
              (campaign != C_CANCELLED || MUT_UNLOCKED_CAMPAIGN_READ) -> status[r] = QUEUED
           :: else -> status[r] = UNKNOWN
           fi;
           printf("recover_expired row %d -> %e\n", r, status[r]);
           leased[r] = 0; expired[r] = 0;
           properties();
           r = NONE
       }
    /* -- lock_finishable, finish (campaigns.sql) -- nothing queued or on the wire: sent */
    :: atomic {
           campaign == C_SENDING && campaign_lock == 0 &&
           !OPEN_ANY ->
           campaign = C_SENT;
           printf("finish: campaign -> sent\n")
       }
    od
}

/* Time passes: a lease runs out, nobody having the row in hand any more (its worker was killed)
   or (a bounded number of times) under a live worker that is just slow. */
#define EXPIRABLE(r) (status[r] == SENDING && !expired[r] && (holders[r] == 0 || stalls < MAX_STALLS))

proctype Clock() {
    byte r = NONE;
end:
    do
    :: atomic {
           if
           EACH_ROW(EXPIRABLE, r)
           fi;
           if :: holders[r] > 0 -> stalls++ :: else -> skip fi;
           expired[r] = 1;
           printf("time: row %d's lease runs out (claimed by W%d, in %d live worker's hands)\n",
                  r, claimed_by[r], holders[r]);
           r = NONE
       }
    od
}

#define RETRIABLE(r) (status[r] == UNKNOWN && retried[r] < MAX_RETRIES && campaign_lock == 0)
#define MARKABLE(r) (status[r] == UNKNOWN && !marked[r])

proctype Operator() {
    byte r = NONE;
end:
    do
    /* -- pause, resume (campaigns.sql) -- */
    :: atomic { campaign == C_SENDING && !paused_once && campaign_lock == 0 ->
                campaign = C_PAUSED; paused_once = 1; printf("operator: pause\n") }
    :: atomic { campaign == C_PAUSED && campaign_lock == 0 -> campaign = C_SENDING;
                printf("operator: resume\n") }
    /* -- lock_campaign, cancel (campaigns.sql) -- its queued rows cancelled with it */
    :: atomic { (campaign == C_SENDING || campaign == C_PAUSED) && campaign_lock == 0 ->
                campaign_lock = OPERATOR };
       atomic {
           campaign = C_CANCELLED;
           printf("operator: cancel\n");
           for (k : 0 .. ROWS - 1) {
               if :: status[k] == QUEUED -> status[k] = CANCELLED :: else -> skip fi
           }
           k = 0;
           campaign_lock = 0;
           properties()
       }
    /* -- lock_campaigns_of_unknown, retry_unknown (sends.sql) -- the operator accepts a
       possible duplicate; a finished campaign goes back to sending */
    :: atomic {
           if
           EACH_ROW(RETRIABLE, r)
           fi;
           campaign_lock = OPERATOR
       };
       atomic {
           if
           :: status[r] == UNKNOWN && campaign != C_CANCELLED ->
              status[r] = QUEUED; handed[r] = 0; claimed_by[r] = NOBODY; retried[r]++; fresh[r] = 0;
              printf("operator: retry row %d -> queued\n", r);
              if :: campaign == C_SENT -> campaign = C_SENDING :: else -> skip fi
           :: else -> skip
           fi;
           campaign_lock = 0;
           properties();
           r = NONE
       }
    /* -- settle_unknown (verdicts.sql), verdict 'sent': an operator's "mark delivered" -- */
    :: atomic {
           if
           EACH_ROW(MARKABLE, r)
           fi;
           status[r] = SENT; marked[r] = 1;
           printf("operator: mark row %d delivered\n", r);
           properties();
           r = NONE
       }
    od
}

/* A recipient opts out, at any moment (unsubscribe, suppressions.sql). */
#define SUBSCRIBED(r) (!optout[r])

proctype Recipients() {
    byte r = NONE;
end:
    do
    :: atomic {
           if
           EACH_ROW(SUBSCRIBED, r)
           fi;
           optout[r] = 1;
           printf("row %d's address opts out\n", r);
           r = NONE
       }
    od
}

#if ROWS == 1
#define ALL_FINAL (FINAL(0))
#elif ROWS == 2
#define ALL_FINAL (FINAL(0) && FINAL(1))
#else
#define ALL_FINAL (FINAL(0) && FINAL(1) && FINAL(2))
#endif

/* P5 for runs that stop: when nothing at all can move, every row is final. (A campaign that is
   paused cannot be the cause: the operator can always resume it.) */
proctype Quiescence() {
    timeout -> assert(ALL_FINAL)
}

init {
    atomic {
        byte w;
        for (w : 0 .. WORKERS - 1) {
            run Worker(w);
#ifdef IDEMPOTENT
            run Settler(w);
#endif
        }
        run Recovery(); run Clock(); run Operator(); run Recipients(); run Quiescence()
    }
}

ltl settles { <> [] ALL_FINAL }
