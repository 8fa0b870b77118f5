/*
 * The send protocol of growth/managers/*.sql as a Promela model, checked exhaustively by spin.
 *
 * One campaign of ROWS recipients, WORKERS run_sender processes and the recovery racing them,
 * an operator (pause, resume, cancel, retry an unknown row, mark it delivered) and recipients
 * opting out at any moment. Each atomic step below is one SQL statement, named by its block in
 * growth/managers/*.sql; between any two of them a worker may crash (its local state is lost and
 * it comes back under a new worker id), a lease may expire (time passes; the worker may still be
 * alive and slow), and any other process may run.
 *
 * Compile-time choices: -DIDEMPOTENT (the receiver de-duplicates on the job id), and one of the
 * MUT_* mutations (verify/mutants.py) to show that the checks bite.
 *
 * Properties (assertions after every step, and the LTL formula `finished`):
 *   P1 plain receiver: at most one delivery per job id, unless an operator retried it
 *   P2 no row ends 'sent' without a delivery (or an operator's "mark delivered")
 *   P3 no delivery to an address whose opt-out committed before the last check before the wire
 *      (the hand-over with a plain receiver, the blocked read with an idempotent one)
 *   P4 'sending' => a lease
 *   P5 (liveness, weak fairness) once workers stop crashing and stalling, every row reaches a
 *      final state
 *
 * Not modelled, on purpose: a transport outcome that lies (an SMTP connection dropped after the
 * message was accepted but before the reply reads as transient: with a plain receiver, the retry
 * is a duplicate no sender can rule out; see the README).
 */

#ifndef ROWS
#define ROWS 2
#endif
#ifndef WORKERS
#define WORKERS 2
#endif
#define MAX_ATTEMPTS 2
#define MAX_CRASHES 1
#define MAX_STALLS 1     /* leases that expire under a live (slow) worker */
#define MAX_RETRIES 1    /* an operator's retries of an unknown row */
#define NOBODY 0

#ifdef IDEMPOTENT
#define RECEIVER_DEDUPS 1
#else
#define RECEIVER_DEDUPS 0
#endif
#ifndef MUT_SETTLE_NO_OWNER
#define MUT_SETTLE_NO_OWNER 0
#endif
#ifndef MUT_HANDOVER_NO_OWNER
#define MUT_HANDOVER_NO_OWNER 0
#endif
#ifndef MUT_NO_OPTOUT_RECHECK
#define MUT_NO_OPTOUT_RECHECK 0
#endif
#ifndef MUT_SENT_BEFORE_WIRE
#define MUT_SENT_BEFORE_WIRE 0
#endif
#ifndef MUT_RECOVER_HANDED_TO_QUEUED
#define MUT_RECOVER_HANDED_TO_QUEUED 0
#endif

mtype = { QUEUED, SENDING, SENT, SUPPRESSED, FAILED, UNKNOWN, CANCELLED };  /* growth_sends.status */
mtype = { C_SENDING, C_PAUSED, C_SENT, C_CANCELLED };                       /* growth_campaigns.status */
mtype = { O_NONE, O_SENT, O_TRANSIENT, O_PERMANENT };                       /* what the transport said */

/* growth_sends, one row per recipient */
mtype status[ROWS] = QUEUED;
byte claimed_by[ROWS];      /* '' = NOBODY */
bit handed[ROWS];           /* handed_over_at IS NOT NULL */
bit leased[ROWS];           /* lease_expires_at IS NOT NULL */
bit expired[ROWS];          /* lease_expires_at < now() */
byte attempts[ROWS];
bit optout[ROWS];           /* a suppression of the address committed (or an unsubscribe) */
mtype campaign = C_SENDING; /* built already: the build's uniqueness is the stateful test's */

/* the world outside the database, and what the properties are about */
byte delivered[ROWS];       /* messages in the recipient's inbox */
bit accepted[ROWS];         /* an idempotent receiver has seen the key */
byte retried[ROWS];
bit marked[ROWS];
byte crashes, stalls, next_worker = 1;
bit paused_once, cancelled_once;

hidden byte i;  /* the invariants' loop index: inside atomic steps only, not state */

inline invariants() {
    i = 0;
    do
    :: i < ROWS ->
       assert(status[i] != SENDING || leased[i]);                          /* P4 */
       assert(RECEIVER_DEDUPS || delivered[i] <= 1 + retried[i]);           /* P1 */
       assert(status[i] != SENT || delivered[i] > 0 || marked[i]);           /* P2 */
       i++
    :: else -> break
    od
}

#define FINAL(k) (status[k] == SENT || status[k] == SUPPRESSED || status[k] == FAILED || \
                  status[k] == UNKNOWN || status[k] == CANCELLED)

proctype Worker() {
    byte me, r;
    bit mine[ROWS], go[ROWS], clean_at_check[ROWS];
    mtype outcome[ROWS];
restart:
    atomic { me = next_worker; next_worker++ }
    do
    :: {
       /* -- claim (sends.sql) -- SKIP LOCKED, the opt-out re-checked; with an idempotent
          receiver the claim hands the rows over too */
       atomic {
           campaign == C_SENDING;
           r = 0;
           do
           :: r < ROWS ->
              mine[r] = 0; go[r] = 0; outcome[r] = O_NONE;
              if
              :: status[r] == QUEUED ->
                 if
                 :: claimed_by[r] = me;
                    if
                    :: optout[r] && !MUT_NO_OPTOUT_RECHECK -> status[r] = SUPPRESSED
                    :: else -> status[r] = SENDING; attempts[r]++; leased[r] = 1; expired[r] = 0;
                               handed[r] = RECEIVER_DEDUPS; mine[r] = 1
                    fi
                 :: skip  /* this row goes to another batch */
                 fi
              :: else -> skip
              fi;
              r++
           :: else -> break
           od;
           invariants()
       };
#ifdef IDEMPOTENT
       /* -- blocked (sends.sql) -- a read: which of my rows an opt-out now blocks */
       atomic {
           r = 0;
           do
           :: r < ROWS ->
              if
              :: mine[r] -> go[r] = !(optout[r] && !MUT_NO_OPTOUT_RECHECK); clean_at_check[r] = !optout[r]
              :: else -> skip
              fi;
              r++
           :: else -> break
           od
       };
       /* -- hand_over (sends.sql) -- of the blocked rows only: suppressed if still mine */
       atomic {
           r = 0;
           do
           :: r < ROWS ->
              if
              :: mine[r] && !go[r] && status[r] == SENDING &&
                 (claimed_by[r] == me || MUT_HANDOVER_NO_OWNER) ->
                 status[r] = SUPPRESSED; handed[r] = 0; attempts[r] = attempts[r] - 1; leased[r] = 0
              :: else -> skip
              fi;
              r++
           :: else -> break
           od;
           invariants()
       };
#else
       /* -- hand_over (sends.sql) -- committed before the transport sees the rows; the opt-out
          checked once more; only rows still mine */
       atomic {
           r = 0;
           do
           :: r < ROWS ->
              if
              :: mine[r] && status[r] == SENDING && (claimed_by[r] == me || MUT_HANDOVER_NO_OWNER) ->
                 clean_at_check[r] = !optout[r];
                 if
                 :: optout[r] && !MUT_NO_OPTOUT_RECHECK ->
                    status[r] = SUPPRESSED; handed[r] = 0; attempts[r] = attempts[r] - 1; leased[r] = 0
                 :: else ->
                    handed[r] = 1; go[r] = 1;
                    if
                    :: MUT_SENT_BEFORE_WIRE -> status[r] = SENT; leased[r] = 0  /* the write-up's order */
                    :: else -> skip
                    fi
                 fi
              :: else -> skip
              fi;
              r++
           :: else -> break
           od;
           invariants()
       };
#endif
       /* the transport: each message sent, refused for now, or refused for good */
       r = 0;
       do
       :: r < ROWS ->
          if
          :: go[r] ->
             atomic {
                 if
                 :: outcome[r] = O_SENT;
                    assert(clean_at_check[r]);                                       /* P3 */
                    if
                    :: RECEIVER_DEDUPS && accepted[r] -> skip                       /* absorbed */
                    :: else -> accepted[r] = 1; delivered[r]++
                    fi
                 :: outcome[r] = O_TRANSIENT
                 :: outcome[r] = O_PERMANENT
                 fi;
                 invariants()
             }
          :: else -> skip
          fi;
          r++
       :: else -> break
       od;
       /* -- settle (sends.sql) -- only rows still mine; an unknown row now known sent is sent */
       atomic {
           r = 0;
           do
           :: r < ROWS ->
              if
              :: outcome[r] != O_NONE && (claimed_by[r] == me || MUT_SETTLE_NO_OWNER) &&
                 (status[r] == SENDING || (status[r] == UNKNOWN && outcome[r] == O_SENT)) ->
                 if
                 :: outcome[r] == O_SENT -> status[r] = SENT
                 :: outcome[r] == O_TRANSIENT && campaign == C_CANCELLED -> status[r] = CANCELLED
                 :: outcome[r] == O_TRANSIENT && campaign != C_CANCELLED && attempts[r] < MAX_ATTEMPTS ->
                    status[r] = QUEUED
                 :: else -> status[r] = FAILED
                 fi;
                 leased[r] = 0
              :: else -> skip
              fi;
              r++
           :: else -> break
           od;
           invariants()
       }
       } unless { atomic { crashes < MAX_CRASHES -> crashes++ } };
       /* a crash: everything this process knew is gone; it comes back as another worker */
       if
       :: crashes > 0 && me < WORKERS + MAX_CRASHES && next_worker <= WORKERS + crashes -> goto restart
       :: else -> skip
       fi
    od
}

proctype Recovery() {
    byte r;
    do
    /* -- recover_expired (sends.sql) -- never handed over: queued again, the attempt not
       counted; handed over: retried with the same key for a receiver that de-duplicates,
       else 'unknown' for an operator */
    :: atomic {
           r = 0;
           do
           :: r < ROWS ->
              if
              :: status[r] == SENDING && expired[r] ->
                 if
                 :: !handed[r] -> status[r] = QUEUED; attempts[r] = attempts[r] - 1
                 :: handed[r] && (RECEIVER_DEDUPS || MUT_RECOVER_HANDED_TO_QUEUED) &&
                    attempts[r] < MAX_ATTEMPTS -> status[r] = QUEUED
                 :: else -> status[r] = UNKNOWN
                 fi;
                 leased[r] = 0
              :: else -> skip
              fi;
              r++
           :: else -> break
           od;
           invariants()
       }
    /* -- lock_finishable, finish (campaigns.sql) -- nothing queued or on the wire: sent */
    :: atomic {
           campaign == C_SENDING;
           r = 0;
           do
           :: r < ROWS && status[r] != QUEUED && status[r] != SENDING -> r++
           :: r < ROWS && (status[r] == QUEUED || status[r] == SENDING) -> break
           :: r == ROWS -> campaign = C_SENT; break
           od
       }
    od
}

/* Time passes: a lease runs out, its worker dead or (a bounded number of times) just slow. */
proctype Clock() {
    byte r;
    do
    :: atomic {
           select(r : 0 .. ROWS - 1);
           status[r] == SENDING && !expired[r] && (crashes > 0 || stalls < MAX_STALLS) ->
           expired[r] = 1;
           if
           :: crashes == 0 -> stalls++
           :: else -> skip
           fi
       }
    od
}

proctype Operator() {
    byte r;
    do
    /* -- pause, resume (campaigns.sql) -- */
    :: atomic { campaign == C_SENDING && !paused_once -> campaign = C_PAUSED; paused_once = 1 }
    :: atomic { campaign == C_PAUSED -> campaign = C_SENDING }
    /* -- lock_campaign, cancel (campaigns.sql) -- queued rows cancelled with it */
    :: atomic {
           (campaign == C_SENDING || campaign == C_PAUSED) && !cancelled_once ->
           cancelled_once = 1; campaign = C_CANCELLED;
           r = 0;
           do
           :: r < ROWS -> if :: status[r] == QUEUED -> status[r] = CANCELLED :: else -> skip fi; r++
           :: else -> break
           od;
           invariants()
       }
    /* -- lock_campaigns_of_unknown, retry_unknown (sends.sql) -- the operator accepts a
       possible duplicate; a finished campaign goes back to sending */
    :: atomic {
           select(r : 0 .. ROWS - 1);
           status[r] == UNKNOWN && retried[r] < MAX_RETRIES && campaign != C_CANCELLED ->
           status[r] = QUEUED; handed[r] = 0; claimed_by[r] = NOBODY; retried[r]++;
           if :: campaign == C_SENT -> campaign = C_SENDING :: else -> skip fi;
           invariants()
       }
    /* -- mark_delivered (sends.sql) -- */
    :: atomic {
           select(r : 0 .. ROWS - 1);
           status[r] == UNKNOWN && !marked[r] -> status[r] = SENT; marked[r] = 1; invariants()
       }
    od
}

/* A recipient opts out, at any moment (unsubscribe, suppressions.sql). */
proctype Recipients() {
    byte r;
    do
    :: atomic { select(r : 0 .. ROWS - 1); !optout[r] -> optout[r] = 1 }
    od
}

init {
    atomic {
        byte w = 0;
        do
        :: w < WORKERS -> run Worker(); w++
        :: else -> break
        od;
        run Recovery(); run Clock(); run Operator(); run Recipients()
    }
}

#define ALL_FINAL (FINAL(0) && (ROWS < 2 || FINAL(1)) && (ROWS < 3 || FINAL(2)))
ltl finished { <> [] (ALL_FINAL || campaign == C_PAUSED) }
