/*
 * The next send protocol, before it is built: a lease per batch behind a campaign cursor
 * (docs/one-write-per-recipient.md, shape g: issue 17's "fewer writes per recipient"). Checked
 * exhaustively by spin as send_protocol.pml checks today's (`make verify`; verify/check.py).
 *
 * What changes from today's protocol. A claim writes no send row: it locks the campaign's cursor
 * row (growth_send_cursors), moves it past the next rows and names them in one lease row
 * (growth_send_leases: the claim's id, the worker, the expiry, the row ids, handed_over_at). A row
 * in flight stays 'queued'. A plain receiver's hand-over stamps the lease, not its rows. The
 * settle ends the lease (`DELETE ... WHERE id = <the claim's lease> AND worker_id = <me>`) and, only
 * if that matched, writes each of its rows once with its outcome: one row version per recipient.
 * An expired lease is freed (never handed over, or handed to a receiver that de-duplicates) for a
 * claim to take over under a new id with the same job ids, or its rows become 'unknown' (handed to
 * a plain receiver): the only per-row write outside the settle. A transient outcome leaves the row
 * 'queued' behind the cursor with next_attempt_at set, which the claim's retry path takes.
 *
 * The model: one campaign of ROWS recipients (built); WORKERS run_sender processes, each claiming
 * batches of 1 or 2 rows (a claim through the cursor or the retry path, or a take-over of a freed
 * lease); the recovery; an operator (pause, resume, cancel, retry an 'unknown' row, mark it
 * delivered); recipients opting out at any moment; time letting leases run out (a dead worker's,
 * and MAX_STALLS times a live, slow worker's). One atomic step is one SQL statement, named by the
 * block it will be. A worker may be killed between any two steps, and between two messages of its
 * batch; it comes back under a new worker id. With -DIDEMPOTENT the receiver de-duplicates on the
 * job id: the claim hands over, the worker reads `blocked` before the wire, and the settle waits
 * on the worker's settler thread while the worker claims again.
 *
 * Properties (the same promises as send_protocol.pml's, P4 restated for leases):
 *   P1 at most one delivery per job id between two retries by an operator
 *   P2 no row is 'sent' without a delivery (or an operator's "mark delivered")
 *   P3 no delivery to an address whose opt-out committed before the row's last check before
 *      the wire (the hand-over, plain; the `blocked` read, idempotent)
 *   P4 the leases are disjoint, a row in a lease is 'queued' (or 'suppressed' by its plain
 *      hand-over), a row due again (a retry, an
 *      operator's requeue, a paced row set aside) is in none, and a 'queued' row is in one of
 *      them or past the cursor: where a claim finds it (the cursor's lock and the settle's
 *      compare-and-set are what make a lease a claim)
 *   P6 while an attempt is on the wire its row is not written by another, and no late settle of
 *      an earlier claim (another worker's, or the same worker's before a take-over) overwrites
 *      the answer the current one got
 *   P5 (LTL `settles`, weak fairness) once crashes and stalls are over, every row is final
 *
 * Abstracted as send_protocol.pml does (its header says why): the retry horizon (MAX_ATTEMPTS),
 * throttles, rate limits and pacing (but for pacing's one new step: a claim may set a row past the
 * cursor aside, due again behind it, as a paced destination's row without tokens is), backoff
 * times (a retry is due at once), a worker's several connections (each wire's chunk is a lease of
 * its own, as another worker's batch is here), the build, and follow-ups (take_from_original has
 * to leave out rows in live leases, under the cursor's lock: the stateful test's, when it is
 * built). Each statement is one atomic step; the claim is one because it holds the cursor's row
 * lock from its read to its commit (MUT_CURSOR_UNLOCKED shows what that buys), and the settle and
 * the recovery because they lock the campaign row (FOR SHARE) and the lease row they delete or
 * free.
 */

#ifndef ROWS
#define ROWS 2
#endif
#if ROWS > 2
#error "the model is written for 1 or 2 rows"
#endif
#ifndef WORKERS
#define WORKERS 2
#endif
#ifndef MAX_CRASHES
#define MAX_CRASHES 1
#endif
#define MAX_ATTEMPTS 2
#define MAX_STALLS 1
#define MAX_RETRIES 1
#define NOBODY 0
#define NONE 255
#define OPERATOR 1

#ifdef IDEMPOTENT
#define RECEIVER_DEDUPS 1
#else
#define RECEIVER_DEDUPS 0
#endif

/* Known-bad changes; verify/check.py turns each on alone and expects a counterexample. */
#ifndef PACED                      /* a claim may set a paced row aside (0: the --long bound, */
#define PACED 1                    /* where it would not fit in memory) */
#endif
#ifndef MUT_SET_ASIDE_NOT_DUE      /* a paced row passed over is not made due: behind the */
#define MUT_SET_ASIDE_NOT_DUE 0    /* cursor, in no lease, nothing would ever take it */
#endif
#ifndef MUT_CURSOR_UNLOCKED        /* the claim reads the cursor, then moves it: no row lock */
#define MUT_CURSOR_UNLOCKED 0
#endif
#ifndef MUT_TAKEOVER_KEEPS_ID      /* a take-over keeps the lease's id: the settle matches the */
#define MUT_TAKEOVER_KEEPS_ID 0    /* lease and the worker, not the claim */
#endif
#ifndef MUT_SETTLE_UNGATED         /* the settle writes its rows even when its DELETE matched none */
#define MUT_SETTLE_UNGATED 0
#endif
#ifndef MUT_SETTLE_NO_OWNER        /* DELETE ... WHERE id = <lease>, without worker_id = <me> */
#define MUT_SETTLE_NO_OWNER 0
#endif
#ifndef MUT_HANDOVER_NO_OWNER      /* the hand-over stamps a lease that is not this claim's */
#define MUT_HANDOVER_NO_OWNER 0
#endif
#ifndef MUT_CHECK_IGNORES_OPTOUT   /* hand-over (plain) / blocked (idempotent) never blocks */
#define MUT_CHECK_IGNORES_OPTOUT 0
#endif
#ifndef MUT_RECOVER_FREES_HANDED   /* an expired lease handed to a plain receiver is freed too */
#define MUT_RECOVER_FREES_HANDED 0
#endif
#ifndef MUT_CANCEL_TAKES_LEASED    /* cancel also cancels the 'queued' rows of live leases */
#define MUT_CANCEL_TAKES_LEASED 0
#endif
#ifndef MUT_UNLOCKED_CAMPAIGN_READ /* settle/recover read the campaign without locking it */
#define MUT_UNLOCKED_CAMPAIGN_READ 0
#endif
#ifndef MUT_CLAIM_IGNORES_OPTOUT   /* the claim does not read opt-outs */
#define MUT_CLAIM_IGNORES_OPTOUT 0
#endif
#ifndef MUT_OPTOUT_NO_TICK         /* an opt-out leaves the tenant's opt-out clock alone */
#define MUT_OPTOUT_NO_TICK 0
#endif

#if MUT_CURSOR_UNLOCKED
#define LEASES (ROWS + 1) /* that mutant's leases overlap: room for one more */
#else
#define LEASES ROWS      /* disjoint and never empty: never more than ROWS at once */
#endif

mtype = { QUEUED, SENT, SUPPRESSED, FAILED, UNKNOWN, CANCELLED };   /* growth_sends.status */
mtype = { C_SENDING, C_PAUSED, C_SENT, C_CANCELLED };               /* growth_campaigns.status */
mtype = { O_NONE, O_SENT, O_TRANSIENT, O_PERMANENT, O_BLOCKED };     /* a row's outcome */

/* growth_sends */
mtype status[ROWS] = QUEUED;
bit due[ROWS];              /* next_attempt_at IS NOT NULL: a retry behind the cursor */
byte attempts[ROWS];
byte unknown_of[ROWS];      /* the lease whose recovery made the row 'unknown' (0: none) */
bit optout[ROWS];
/* growth_opt_out_clocks: ticks with every opt-out, in its transaction (a trigger) */
byte ticks;
/* growth_send_cursors: rows below it have been claimed once */
byte cursor;
/* growth_send_leases, in LEASES slots; `lease` is the row's id, never reused */
bit l_live[LEASES];
byte l_id[LEASES];
byte l_worker[LEASES];      /* NOBODY: freed, for a claim to take over */
bit l_handed[LEASES];
bit l_expired[LEASES];
byte l_tries[LEASES];       /* take-overs after a hand-over to a receiver that de-duplicates */
bit member[LEASES * ROWS];  /* the lease's row ids */
byte last_id;
/* growth_campaigns, and who holds its row lock */
mtype campaign = C_SENDING;
byte campaign_lock;

/* the world outside the database */
bit accepted[ROWS];
bit refused[ROWS];
bit current_ok[ROWS];       /* the receiver accepted the claim that now holds the row */
byte fresh[ROWS];
byte retried[ROWS];
bit marked[ROWS];
byte crashes, stalls;
bit paused_once, contained_once, unrenderable_once;

/* what each worker has in hand (the lease's id), and the settle waiting on its settler thread */
byte held[WORKERS];
byte pending_lease[WORKERS] = NONE;
byte pending_id[WORKERS];
byte pending_by[WORKERS];
bit pending_mine[WORKERS * ROWS];
mtype pending_out[WORKERS * ROWS];

byte k, j, c;               /* loop indexes inside atomic steps only: 0 between steps */

#define IN(l, r) member[(l) * ROWS + (r)]
#define FINAL(r) (status[r] == SENT || status[r] == SUPPRESSED || status[r] == FAILED || \
                  status[r] == UNKNOWN || status[r] == CANCELLED)

/* After every step: P1, P2, P4; then forget what no statement reads again. */
inline properties() {
    k = 0;
    do
    :: k < ROWS ->
       assert(fresh[k] <= 1);                                                /* P1 */
       assert(status[k] != SENT || accepted[k] || marked[k]);                /* P2 */
       j = 0; c = 0;
       do
       :: j < LEASES ->
          if
          :: l_live[j] && IN(j, k) -> c++;
             assert(status[k] == QUEUED ||                                   /* P4 */
                    (status[k] == SUPPRESSED && l_handed[j]))
          :: else -> skip
          fi;
          j++
       :: else -> break
       od;
       assert(c <= 1);                                                       /* P4 */
       assert(status[k] != QUEUED || c > 0 || due[k] || k >= cursor);        /* P4 */
       if
       :: status[k] != UNKNOWN -> unknown_of[k] = 0
       :: else -> skip
       fi;
       if
       :: FINAL(k) -> attempts[k] = 0; due[k] = 0; current_ok[k] = 0
       :: else -> skip
       fi;
       assert(!due[k] || c == 0);                                            /* P4 */
       k++
    :: else -> k = 0; j = 0; c = 0; break
    od
}

/* the lease slot of a new lease: the first one not live */
inline allocate(l) {
    l = 0;
    do
    :: l < LEASES && l_live[l] -> l++
    :: l < LEASES && !l_live[l] -> break
    od;
    last_id++;
    l_live[l] = 1; l_id[l] = last_id; l_handed[l] = 0; l_expired[l] = 0; l_tries[l] = 0
}

inline delete_lease(l) {
    l_live[l] = 0; l_id[l] = 0; l_worker[l] = NOBODY; l_handed[l] = 0; l_expired[l] = 0;
    l_tries[l] = 0;
    for (k : 0 .. ROWS - 1) { IN(l, k) = 0 }
    k = 0
}

/* -- settle (sends.sql) -- `ended`: DELETE FROM growth_send_leases WHERE id = %(lease)s AND
   worker_id = %(worker_id)s; then each row of the claim written once, only if that matched. A row
   the recovery made 'unknown' while the worker was slow, and that is now known sent, is 'sent'
   (the recovery wrote the lease's id on it). `seen`: the campaign, read under FOR SHARE. The
   claim's rows and outcomes are read from pending_mine and pending_out at `base`: what the worker
   passes to its settler thread (idempotent), or to the statement itself (plain). */
#define OWNS(l, id, who) (l_live[l] && l_id[l] == (id) && l_worker[l] == (who))
#define MATCHES(l, id, who) (l_live[l] && (l_id[l] == (id) || MUT_TAKEOVER_KEEPS_ID) && \
                             (l_worker[l] == (who) || MUT_SETTLE_NO_OWNER))

inline settle(l, id, who, base, seen, ended) {
    ended = MATCHES(l, id, who);
    printf("W%d settle lease %d: %d\n", who, id, ended);
    if
    :: ended -> delete_lease(l)
    :: else -> skip
    fi;
    for (k : 0 .. ROWS - 1) {
        if
        :: pending_mine[(base) + k] && (ended || MUT_SETTLE_UNGATED) && status[k] == QUEUED ->
           assert(!current_ok[k] || pending_out[(base) + k] == O_SENT);              /* P6 */
           if
           :: pending_out[(base) + k] == O_SENT -> status[k] = SENT
           :: pending_out[(base) + k] == O_BLOCKED -> status[k] = SUPPRESSED
           :: pending_out[(base) + k] == O_TRANSIENT && seen == C_CANCELLED -> status[k] = CANCELLED
           :: pending_out[(base) + k] == O_TRANSIENT && seen != C_CANCELLED &&
              attempts[k] + 1 < MAX_ATTEMPTS -> attempts[k]++; due[k] = 1
           :: else -> status[k] = FAILED
           fi;
           current_ok[k] = 0;
           printf("  row %d -> %e\n", k, status[k])
        :: pending_mine[(base) + k] && status[k] == UNKNOWN && unknown_of[k] == (id) &&
           pending_out[(base) + k] == O_SENT ->
           status[k] = SENT; printf("  row %d: unknown -> sent\n", k)
        :: else -> skip
        fi
    }
    k = 0
}

/* A crash point: the process is killed; it restarts under a new worker id with nothing in hand. */
#define CRASH \
    atomic { crashes < MAX_CRASHES -> crashes++; \
             printf("W%d killed (kill -9); restarts as W%d\n", me, WORKERS + crashes); \
             me = WORKERS + crashes; \
             forget(); \
             pending_lease[slot] = NONE; pending_id[slot] = 0; pending_by[slot] = 0; \
             for (k : 0 .. ROWS - 1) { pending_mine[slot * ROWS + k] = 0; \
                                       pending_out[slot * ROWS + k] = 0 } \
             k = 0 }; \
    goto end_idle

inline forget() {
    l = NONE; id = 0; held[slot] = 0; seen = 0; ended = 0; r = 0; n = 0; start = 0;
    kind = 0; looked = 0;
    for (k : 0 .. ROWS - 1) { mine[k] = 0; out[k] = O_NONE; clean[k] = 0; epoch[k] = 0 }
    k = 0
}

#define MINE_ROW(r) mine[r]
#define CLAIMABLE_RETRY(r) (status[r] == QUEUED && due[r])
#define FREE_LEASE(l) (l_live[l] && l_worker[l] == NOBODY)
#if ROWS == 1
#define EMPTY(l) (!IN(l, 0))
#else
#define EMPTY(l) (!IN(l, 0) && !IN(l, 1))
#endif
#if ROWS == 1
#define EACH_ROW(cond, r) :: cond(0) -> r = 0
#else
#define EACH_ROW(cond, r) :: cond(0) -> r = 0 :: cond(1) -> r = 1
#endif
#define EACH_LEASE(cond, l) \
    :: cond(0) -> l = 0 :: LEASES > 1 && cond(1) -> l = 1 :: LEASES > 2 && cond(2) -> l = 2
#define ANY_FREE_LEASE (FREE_LEASE(0) || (LEASES > 1 && FREE_LEASE(1)) || \
                        (LEASES > 2 && FREE_LEASE(2)))

#define RETRY 1
#define PAST_CURSOR 2

/* the next 1 or 2 rows from `start`, the cursor as the claim read it, in a new lease; the
   cursor moved past them. A row of a paced destination may be set aside instead (pacing: its
   destination has no tokens now): due at once behind the cursor, in no lease, where the retry
   path takes it. A lease that gets no row is not kept (see PAST_CURSOR's caller). */
inline past_cursor() {
    allocate(l);
    if
    :: n = 1
    :: start + 2 <= ROWS -> n = 2
    fi;
    for (k : start .. start + n - 1) {
        if
        :: status[k] == QUEUED -> IN(l, k) = 1; mine[k] = 1
        :: PACED && status[k] == QUEUED -> due[k] = !MUT_SET_ASIDE_NOT_DUE;
           printf("W%d claim: row %d set aside (paced)\n", me, k)
        :: else -> skip
        fi
    }
    k = 0;
    cursor = start + n;
    l_handed[l] = RECEIVER_DEDUPS;
    printf("W%d claim: lease %d of rows %d..%d; cursor -> %d\n", me, l_id[l], start,
           start + n - 1, cursor)
}

/* the claim's end: the lease is this worker's, its opt-outs read */
inline claimed() {
    l_worker[l] = me; id = l_id[l]; held[slot] = id; start = 0; n = 0; kind = 0; r = 0;
    looked = ticks;
    for (k : 0 .. ROWS - 1) {
        if
        :: mine[k] ->
           epoch[k] = retried[k]; current_ok[k] = 0;
           if
           :: optout[k] && !MUT_CLAIM_IGNORES_OPTOUT -> out[k] = O_BLOCKED
           :: else -> skip
           fi
        :: else -> skip
        fi
    }
    k = 0;
    properties()
}

proctype Worker(byte slot) {
    byte me = slot + 1;
    byte l = NONE;          /* the lease slot in hand */
    byte id;                /* its id as the claim returned it */
    byte r, n, start, kind;
    bit mine[ROWS];         /* the claim's rows */
    mtype out[ROWS] = O_NONE;
    bit clean[ROWS];        /* no opt-out at the row's last check before the wire */
    byte epoch[ROWS];       /* the operator's retries of the row when this claim began */
    mtype seen;
    bit ended;
    byte looked;            /* the opt-out clock as the claim read it, looking at its rows */

end_idle:
    /* -- claim (sends.sql) -- under the cursor's row lock: take over a freed lease, or lease the
       due retries, or the next rows past the cursor; the opt-outs read as it goes */
    atomic {
        campaign == C_SENDING && (ANY_FREE_LEASE || CLAIMABLE_RETRY(0) ||
                                  CLAIMABLE_RETRY(ROWS - 1) || cursor < ROWS) ->
        l = NONE;
        if
        EACH_LEASE(FREE_LEASE, l)
        :: CLAIMABLE_RETRY(0) || CLAIMABLE_RETRY(ROWS - 1) -> kind = RETRY
        :: cursor < ROWS -> kind = PAST_CURSOR; start = cursor
        fi;
        if
        :: l != NONE ->
           last_id++; l_id[l] = last_id; l_expired[l] = 0; l_handed[l] = RECEIVER_DEDUPS;
           for (k : 0 .. ROWS - 1) { mine[k] = IN(l, k) }
           k = 0;
           printf("W%d claim: takes over a freed lease as %d\n", me, l_id[l]);
           claimed()
        :: kind == RETRY ->
           allocate(l);
           if
           EACH_ROW(CLAIMABLE_RETRY, r)
           fi;
           IN(l, r) = 1; mine[r] = 1; due[r] = 0;
           l_handed[l] = RECEIVER_DEDUPS;
           printf("W%d claim: lease %d of the retry of row %d\n", me, l_id[l], r);
           claimed()
        :: kind == PAST_CURSOR && !MUT_CURSOR_UNLOCKED ->
           past_cursor();
           if
           :: EMPTY(l) ->
              printf("W%d claim: every row set aside, lease %d not kept\n", me, l_id[l]);
              delete_lease(l); forget(); properties(); goto end_idle
           :: else -> claimed()
           fi
        :: kind == PAST_CURSOR && MUT_CURSOR_UNLOCKED ->   /* the read commits; no lock held */
           printf("W%d claim reads the cursor: %d\n", me, start)
        fi
    };
#if MUT_CURSOR_UNLOCKED
    if
    :: kind == PAST_CURSOR ->
       if :: CRASH :: skip fi;
       atomic { past_cursor();
                if
                :: EMPTY(l) ->
                   printf("W%d claim: every row set aside, lease %d not kept\n", me, l_id[l]);
                   delete_lease(l); forget(); properties(); goto end_idle
                :: else -> claimed()
                fi }
    :: else -> skip
    fi;
#endif
    if
    :: CRASH
    /* The campaign cannot be rendered: the engine pauses it and gives its lease back. */
    :: atomic { !contained_once && campaign_lock == 0 -> contained_once = 1;
                if :: campaign == C_SENDING -> campaign = C_PAUSED :: else -> skip fi;
                printf("W%d cannot render the campaign: pause -> %e\n", me, campaign) };
       if :: CRASH :: skip fi;
       atomic {   /* -- release (sends.sql) -- the campaign row locked first, as cancel does */
           campaign_lock == 0 ->
           if
           :: OWNS(l, id, me) && (!l_handed[l] || RECEIVER_DEDUPS) ->
              if
              :: campaign == C_CANCELLED ->
                 for (k : 0 .. ROWS - 1) {
                     if :: IN(l, k) && status[k] == QUEUED -> status[k] = CANCELLED
                     :: else -> skip fi
                 }
                 k = 0;
                 delete_lease(l)
              :: else -> l_worker[l] = NOBODY; l_expired[l] = 0
              fi;
              printf("W%d release lease %d\n", me, id)
           :: else -> skip
           fi;
           properties();
           forget();
           goto end_idle
       }
    /* One recipient's message cannot be rendered: refused for good without the wire. */
    :: atomic { !unrenderable_once -> unrenderable_once = 1;
                if
                EACH_ROW(MINE_ROW, r)
                fi;
                if :: out[r] == O_NONE -> out[r] = O_PERMANENT :: else -> skip fi;
                printf("W%d cannot render row %d\n", me, r); r = 0 }
    :: skip
    fi;
#ifdef IDEMPOTENT
    /* -- opt_outs_moved, then blocked (sends.sql) -- has the tenant's opt-out clock moved since
       the claim's look? If not, that look stands; if so, a read: does an opt-out now block a row
       of the lease? Two statements, one step here: an opt-out between them can only be seen by
       the second, so the step loses no bad run, and spares the states of one (liveness, idempotent
       receiver: 13.9 million states as two steps). */
    atomic {
        for (k : 0 .. ROWS - 1) {
            if
            :: mine[k] -> clean[k] = !optout[k];
               if :: optout[k] && !MUT_CHECK_IGNORES_OPTOUT && ticks != looked ->
                     out[k] = O_BLOCKED
               :: else -> skip fi
            :: else -> skip
            fi
        }
        k = 0;
        printf("W%d opt_outs_moved (%d), blocked read\n", me, ticks != looked)
    };
#else
    /* -- hand_over (leases.sql) -- UPDATE growth_send_leases SET handed_over_at = now() WHERE
       id = %(lease)s AND worker_id = %(worker_id)s, the opt-outs read once more and the rows they
       block written 'suppressed'; committed before the transport sees a row. Nothing matched: not
       ours any more, nothing is sent. Not gated by the opt-out clock: it also writes the rows the
       claim found blocked, which recovery would otherwise make 'unknown' after a crash. */
    atomic {
        if
        :: OWNS(l, id, me) || (MUT_HANDOVER_NO_OWNER && l_live[l]) ->
           l_handed[l] = 1;
           for (k : 0 .. ROWS - 1) {
               if
               :: mine[k] -> clean[k] = !optout[k];
                  if :: optout[k] && !MUT_CHECK_IGNORES_OPTOUT -> out[k] = O_BLOCKED;
                        if :: status[k] == QUEUED -> status[k] = SUPPRESSED :: else -> skip fi
                  :: else -> skip fi
               :: else -> skip
               fi
           }
           k = 0;
           printf("W%d hand_over lease %d\n", me, id)
        :: else ->
           printf("W%d hand_over lease %d: not ours any more\n", me, id);
           forget();
           goto end_idle
        fi
    };
#endif
    /* the transport, message by message: accepted, refused for now, or refused for good */
    r = 0;
    do
    :: r < ROWS && !(mine[r] && out[r] == O_NONE) -> r++
    :: r < ROWS && mine[r] && out[r] == O_NONE ->
       if :: CRASH :: skip fi;
       atomic {
           assert(!OWNS(l, id, me) || status[r] == QUEUED);              /* P6 */
           if
           :: RECEIVER_DEDUPS && accepted[r] -> out[r] = O_SENT
           :: refused[r] && !(RECEIVER_DEDUPS && accepted[r]) -> out[r] = O_PERMANENT
           :: !refused[r] && !(RECEIVER_DEDUPS && accepted[r]) ->
              if
              :: out[r] = O_SENT; assert(clean[r]);                         /* P3 */
                 accepted[r] = 1;
                 if :: epoch[r] == retried[r] -> fresh[r]++ :: else -> skip fi
              :: out[r] = O_TRANSIENT
              :: out[r] = O_PERMANENT; refused[r] = 1
              fi
           fi;
           if
           :: out[r] == O_SENT && OWNS(l, id, me) -> current_ok[r] = 1
           :: else -> skip
           fi;
           printf("W%d transport row %d: %e (delivered since the last retry: %d)\n", me, r,
                  out[r], fresh[r]);
           clean[r] = 0; epoch[r] = 0;
           properties();
           r++
       }
    :: r == ROWS -> r = 0; break
    od;
    if :: CRASH :: skip fi;
#ifdef IDEMPOTENT
    /* handed to the settler thread; the loop blocks while one settle already waits */
    atomic {
        pending_lease[slot] == NONE ->
        pending_lease[slot] = l; pending_id[slot] = id; pending_by[slot] = me;
        for (k : 0 .. ROWS - 1) { pending_mine[slot * ROWS + k] = mine[k];
                                  pending_out[slot * ROWS + k] = out[k] }
        k = 0;
        forget();
        goto end_idle
    }
#else
#if MUT_UNLOCKED_CAMPAIGN_READ
    atomic { seen = campaign };
    if :: CRASH :: skip fi;
#endif
    atomic {
        campaign_lock == 0 ->
#if !MUT_UNLOCKED_CAMPAIGN_READ
        seen = campaign;
#endif
        for (k : 0 .. ROWS - 1) { pending_mine[slot * ROWS + k] = mine[k];
                                  pending_out[slot * ROWS + k] = out[k] }
        settle(l, id, me, slot * ROWS, seen, ended);
        for (k : 0 .. ROWS - 1) { pending_mine[slot * ROWS + k] = 0;
                                  pending_out[slot * ROWS + k] = 0 }
        k = 0;
        properties();
        forget();
        goto end_idle
    }
#endif
}

#ifdef IDEMPOTENT
proctype Settler(byte slot) {
    mtype seen;
    bit ended;
end:
    do
    :: atomic {
#if MUT_UNLOCKED_CAMPAIGN_READ
           pending_lease[slot] != NONE -> seen = campaign
       };
       atomic {
           pending_lease[slot] != NONE ->
#else
           pending_lease[slot] != NONE && campaign_lock == 0 ->
           seen = campaign;
#endif
           settle(pending_lease[slot], pending_id[slot], pending_by[slot], slot * ROWS, seen,
                  ended);
           properties();
           pending_lease[slot] = NONE; pending_id[slot] = 0; pending_by[slot] = 0;
           for (k : 0 .. ROWS - 1) { pending_mine[slot * ROWS + k] = 0;
                                     pending_out[slot * ROWS + k] = 0 }
           k = 0; seen = 0; ended = 0
       }
    od
}
#endif

#define RECOVERABLE(l) (l_live[l] && l_worker[l] != NOBODY && l_expired[l] && campaign_lock == 0)
#if ROWS == 1
#define ANY_QUEUED (status[0] == QUEUED)
#else
#define ANY_QUEUED (status[0] == QUEUED || status[1] == QUEUED)
#endif

proctype Recovery() {
    byte l = NONE;
    bit cancelled;
end:
    do
    /* -- recover_expired (sends.sql) -- one expired lease: never handed over, or handed to a
       receiver that de-duplicates within the attempts: freed, for a claim to take over with the
       same job ids; handed to a plain receiver (or out of attempts): its rows 'unknown', the
       lease's id written on them. In a cancelled campaign nothing is freed: never handed over is
       'cancelled'. */
    :: atomic {
           if
           EACH_LEASE(RECOVERABLE, l)
           fi;
           cancelled = (campaign == C_CANCELLED && !MUT_UNLOCKED_CAMPAIGN_READ);
           for (k : 0 .. ROWS - 1) { if :: IN(l, k) -> current_ok[k] = 0 :: else -> skip fi }
           k = 0;
           if
           :: !l_handed[l] && !cancelled ->
              l_worker[l] = NOBODY; l_expired[l] = 0;
              printf("recover_expired lease %d: freed\n", l_id[l])
           :: l_handed[l] && (RECEIVER_DEDUPS || MUT_RECOVER_FREES_HANDED) && !cancelled &&
              l_tries[l] + 1 < MAX_ATTEMPTS ->
              l_worker[l] = NOBODY; l_expired[l] = 0; l_tries[l]++;
              printf("recover_expired lease %d: handed over, freed\n", l_id[l])
           :: else ->
              for (k : 0 .. ROWS - 1) {
                  if
                  :: IN(l, k) && status[k] == QUEUED && !l_handed[l] -> status[k] = CANCELLED
                  :: IN(l, k) && status[k] == QUEUED && l_handed[l] ->
                     status[k] = UNKNOWN; unknown_of[k] = l_id[l]
                  :: else -> skip
                  fi
              }
              k = 0;
              printf("recover_expired lease %d: its rows unknown (handed over) or cancelled\n",
                     l_id[l]);
              delete_lease(l)
           fi;
           properties();
           l = NONE; cancelled = 0
       }
    /* -- lock_finishable, finish (campaigns.sql) -- no row queued (in flight or not): sent */
    :: atomic {
           campaign == C_SENDING && campaign_lock == 0 && !ANY_QUEUED ->
           campaign = C_SENT;
           printf("finish: campaign -> sent\n")
       }
    od
}

/* a live worker has the lease's current claim in hand, or its settle waiting */
#if WORKERS == 1
#define HELD(l) (held[0] == l_id[l] || pending_id[0] == l_id[l])
#elif WORKERS == 2
#define HELD(l) (held[0] == l_id[l] || held[1] == l_id[l] || \
                 pending_id[0] == l_id[l] || pending_id[1] == l_id[l])
#elif WORKERS == 3
#define HELD(l) (held[0] == l_id[l] || held[1] == l_id[l] || held[2] == l_id[l] || \
                 pending_id[0] == l_id[l] || pending_id[1] == l_id[l] || pending_id[2] == l_id[l])
#else
#error "the model is written for 1 to 3 workers"
#endif
#define EXPIRABLE(l) (l_live[l] && l_worker[l] != NOBODY && !l_expired[l] && \
                      (!HELD(l) || stalls < MAX_STALLS))

proctype Clock() {
    byte l = NONE;
end:
    do
    :: atomic {
           if
           EACH_LEASE(EXPIRABLE, l)
           fi;
           if :: HELD(l) -> stalls++ :: else -> skip fi;
           l_expired[l] = 1;
           printf("time: lease %d runs out (W%d's)\n", l_id[l], l_worker[l]);
           l = NONE
       }
    od
}

#define LEASED(r) ((l_live[0] && IN(0, r)) || (LEASES > 1 && l_live[1] && IN(1, r)) || \
                   (LEASES > 2 && l_live[2] && IN(2, r)))
#define RETRIABLE(r) (status[r] == UNKNOWN && retried[r] < MAX_RETRIES && campaign_lock == 0)
#define MARKABLE(r) (status[r] == UNKNOWN && !marked[r])

proctype Operator() {
    byte r;
    byte l;
end:
    do
    :: atomic { campaign == C_SENDING && !paused_once && campaign_lock == 0 ->
                campaign = C_PAUSED; paused_once = 1; printf("operator: pause\n") }
    :: atomic { campaign == C_PAUSED && campaign_lock == 0 -> campaign = C_SENDING;
                printf("operator: resume\n") }
    /* -- lock_campaign, cancel (campaigns.sql) -- under the campaign's lock and the cursor's:
       the freed leases go, and the queued rows no live lease holds are cancelled */
    :: atomic { (campaign == C_SENDING || campaign == C_PAUSED) && campaign_lock == 0 ->
                campaign_lock = OPERATOR };
       atomic {
           campaign = C_CANCELLED;
           printf("operator: cancel\n");
           for (l : 0 .. LEASES - 1) {
               if :: FREE_LEASE(l) -> delete_lease(l) :: else -> skip fi
           }
           for (r : 0 .. ROWS - 1) {
               if
               :: status[r] == QUEUED && (MUT_CANCEL_TAKES_LEASED || !LEASED(r)) ->
                  status[r] = CANCELLED
               :: else -> skip
               fi
           }
           r = 0; l = 0;
           campaign_lock = 0;
           properties()
       }
    /* -- lock_campaigns_of_unknown, retry_unknown (sends.sql) -- queued again behind the
       cursor, due at once: the operator accepts a possible duplicate */
    :: atomic {
           if
           EACH_ROW(RETRIABLE, r)
           fi;
           campaign_lock = OPERATOR
       };
       atomic {
           if
           :: status[r] == UNKNOWN && campaign != C_CANCELLED ->
              status[r] = QUEUED; due[r] = 1; retried[r]++; fresh[r] = 0;
              printf("operator: retry row %d -> queued\n", r);
              if :: campaign == C_SENT -> campaign = C_SENDING :: else -> skip fi
           :: else -> skip
           fi;
           campaign_lock = 0;
           properties();
           r = 0
       }
    /* -- settle_unknown (verdicts.sql), verdict 'sent' -- */
    :: atomic {
           if
           EACH_ROW(MARKABLE, r)
           fi;
           status[r] = SENT; marked[r] = 1;
           printf("operator: mark row %d delivered\n", r);
           properties();
           r = 0
       }
    od
}

#define SUBSCRIBED(r) (!optout[r])

proctype Recipients() {
    byte r;
end:
    do
    :: atomic {
           if
           EACH_ROW(SUBSCRIBED, r)
           fi;
           optout[r] = 1;
           if :: !MUT_OPTOUT_NO_TICK -> ticks++ :: else -> skip fi;
           printf("row %d's address opts out\n", r);
           r = 0
       }
    od
}

#if ROWS == 1
#define ALL_FINAL (FINAL(0))
#else
#define ALL_FINAL (FINAL(0) && FINAL(1))
#endif

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
