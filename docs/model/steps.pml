/*
 * The step journal's runner (include/idem/steps.h, docs/steps.md), one operation,
 * checked with spin.
 *
 * The operation has two steps, as the refund example: step 1 external (a
 * channel call with request_id and query), step 2 local (its writes commit with
 * its journal row). Runners are processes: StepRunner::Run callers and Worker
 * passes (ResumeDue), any of which may stop at any point (a crash; a restart is
 * another runner). Each takes the operation's lease (a fencing token that grows
 * on every takeover) and fences every later write with it (RenewLease). The
 * store is the journal, and every transaction is one atomic step. Time is
 * nondeterministic: a lease nobody renews may run out at any moment, but not
 * while its holder is inside the external call it fenced (keep every external
 * call shorter than the lease: the documented assumption; -DNO_LEASE_BOUND drops
 * it). Retry delays are abstracted: a runner either sleeps through one (keeping
 * the lease) or ends its lease and leaves the rest to a Worker.
 *
 * Seeded bugs (each must be found):
 *   -DBUG_RESEND_WITHOUT_QUERY  a re-run sends again without asking query first
 *   -DBUG_OVERWRITE_SUCCESS     a failure report overwrites a SUCCESS step
 *                               (UpdateStep without "unless SUCCESS")
 *
 * Properties: the ltl blocks at the end; docs/model/README.md maps every part
 * to the code.
 */

/* Step statuses (StepStatus). */
#define PENDING 0
#define SUCCESS 1
#define FAILED  2
#define UNKNOWN 3

/* Operation statuses (OperationStatus); NONE: not created yet. */
#define OP_NONE 0
#define OP_PENDING 1
#define OP_SUCCESS 2
#define OP_COMPENSATING 3  /* compensation itself is not modelled */

/* Outcomes of a call, a query or a commit. */
#define OK          1
#define LOST        2  /* not observed (timeout, lost answer): kDeadlineExceeded, kUnavailable */
#define REJECT      3  /* surely not done, for good: a final error */
#define RETRY_LATER 4  /* surely not done, retryable (e.g. 429) */
#define CRASHED     5
#define Q_DONE      6
#define Q_NOTFOUND  7
#define Q_UNKNOWN   8

#define MAX_ATTEMPTS 2  /* each step's RetryPolicy::max_attempts */

/* The journal: idem_operations and idem_steps. */
byte op = OP_NONE;
byte op_token = 0;
bool op_live = false;  /* lease_until > now */
byte st[2];            /* step statuses, PENDING at creation */
byte tries[2];         /* retry_count */

/* The external system of step 1, and the local effect of step 2. */
byte effects = 0;
bool unresolved = false;  /* a send whose outcome nobody has observed or queried since */
byte local_effects = 0;

/* Ghost: the lease holder is inside its fenced external call. */
byte in_window = 0;

/* Violations, each the subject of one ltl property. */
bool dup_effect = false;
bool blind_send = false;
bool redo = false;

#ifdef BUG_RESEND_WITHOUT_QUERY
#define MAY_HAVE_BEEN_SENT false
#else
#define MAY_HAVE_BEEN_SENT (st[0] != PENDING || tries[0] > 0)
#endif

#ifdef BUG_OVERWRITE_SUCCESS
#define KEEPS_SUCCESS(i) false
#else
#define KEEPS_SUCCESS(i) (st[i] == SUCCESS)
#endif

/* Fence (StepRunner::Impl::Fence): the write goes on only while `tok` holds the
   lease, and renews it. Inside an atomic block. */
inline fence(tok) {
  if
  :: op_token != tok -> goto done
  :: else -> op_live = true
  fi
}

proctype Runner() {
  byte tok = 0, r = 0, i = 0;
  bool unknown = false, retryable = false;

  /* Impl::Take (Run) or ResumeDue: create the operation, or take its lease. */
  atomic {
    if
    :: op == OP_NONE -> op = OP_PENDING; op_token = 1; op_live = true; tok = 1
    :: op == OP_PENDING && !op_live -> op_token++; op_live = true; tok = op_token
    :: else -> goto done  /* final, compensating, or busy: another runner's lease is live */
    fi
  }

unit:
  /* Impl::RunUnit: one transaction: Fence, LoadJournal (locked), Forward. */
  atomic {
    fence(tok);
    if
    :: op != OP_PENDING -> goto done
    :: else -> skip
    fi;
    if
    :: st[0] != SUCCESS ->
       i = 0;
       if
       :: MAY_HAVE_BEEN_SENT -> goto probe  /* commit (the renewal), then query */
       :: else -> st[0] = UNKNOWN; in_window++; goto call  /* in flight, committed */
       fi
    :: st[0] == SUCCESS && st[1] != SUCCESS ->
       /* The local step: execute, UpdateStep(SUCCESS), commit, all in this transaction. */
       i = 1;
       if
       :: local_effects++; st[1] = SUCCESS; r = OK
       :: local_effects++; st[1] = SUCCESS; r = LOST  /* committed, the answer lost */
       :: r = RETRY_LATER  /* a retryable failure, or the commit failed: rolled back */
       :: r = REJECT       /* a final failure: rolled back */
       fi;
       if
       :: local_effects > 1 -> redo = true
       :: else -> skip
       fi
    :: else ->
       op = OP_SUCCESS; goto done  /* Impl::Finish */
    fi
  }
  if
  :: r == OK -> r = 0; goto unit
  :: r == LOST -> r = 0; unknown = false; retryable = true; goto failed
  :: r == RETRY_LATER -> r = 0; unknown = false; retryable = true; goto failed
  :: r == REJECT -> r = 0; unknown = false; retryable = false; goto failed
  fi;

probe:
  /* query(request_id) before any re-send. */
  atomic {
    if
    :: effects > 0 -> r = Q_DONE; unresolved = false
    :: effects == 0 -> r = Q_NOTFOUND; unresolved = false
    :: r = Q_UNKNOWN  /* cannot tell yet (or the query failed) */
    fi
  }
  if
  :: r == Q_DONE ->
     atomic {
       fence(tok);
       if
       :: st[0] != SUCCESS -> st[0] = SUCCESS
       :: else -> skip
       fi;
       r = 0
     }
     goto unit
  :: r == Q_UNKNOWN -> r = 0; unknown = true; retryable = true; goto failed
  :: r == Q_NOTFOUND ->
     atomic {
       fence(tok);
       if
       :: st[0] != SUCCESS -> st[0] = UNKNOWN
       :: else -> skip
       fi;
       in_window++;
       r = 0
     }
  fi;

call:
  /* def.execute: the external system receives the request (or not). */
  atomic {
    if
    :: r = CRASHED  /* the runner dies before sending */
    :: r = 0
    fi;
    if
    :: r != CRASHED && unresolved -> blind_send = true
    :: else -> skip
    fi;
    if
    :: r != CRASHED && st[0] == SUCCESS -> redo = true
    :: else -> skip
    fi;
    if
    :: r == CRASHED -> skip
    :: else ->
       if
       :: effects++;
          if
          :: effects > 1 -> dup_effect = true
          :: else -> skip
          fi;
          if
          :: unresolved = false; r = OK
          :: unresolved = true; r = LOST
          fi
       :: r = REJECT; unresolved = false
       :: r = RETRY_LATER; unresolved = false
       :: r = LOST; unresolved = true
       fi
    fi;
    in_window--
  }
  if
  :: r == CRASHED -> goto done
  :: r == OK ->
     atomic {
       fence(tok);
       if
       :: st[0] != SUCCESS -> st[0] = SUCCESS
       :: else -> skip
       fi;
       r = 0
     }
     goto unit
  :: r == LOST -> r = 0; unknown = true; retryable = true; goto failed
  :: r == REJECT -> r = 0; unknown = false; retryable = false; goto failed
  :: r == RETRY_LATER -> r = 0; unknown = false; retryable = true; goto failed
  fi;

failed:
  /* Impl::StepFailed for step i. */
  atomic {
    fence(tok);
    if
    :: KEEPS_SUCCESS(i) -> goto unit  /* a commit whose answer was lost made it SUCCESS */
    :: else ->
       if
       :: unknown -> st[i] = UNKNOWN
       :: else -> st[i] = FAILED
       fi;
       tries[i]++;
       if
       :: (unknown || retryable) && tries[i] < MAX_ATTEMPTS -> skip
       :: else -> op = OP_COMPENSATING; goto done
       fi
    fi
  }
  /* Impl::Drive: sleep to next_retry_at keeping the lease, or end it (a Worker resumes). */
  if
  :: goto unit
  :: atomic {
       if
       :: op_token == tok -> op_live = false
       :: else -> skip
       fi
     }
     goto done
  fi;

done:
  skip
}

#ifdef NO_LEASE_BOUND
#define LEASE_BOUND true
#else
#define LEASE_BOUND (in_window == 0)
#endif

/* Time: a lease nobody renews runs out, unless its holder is inside its call. */
active proctype Clock() {
end:
  do
  :: atomic { op == OP_PENDING && op_live && LEASE_BOUND -> op_live = false }
  od
}

init {
  atomic {
    run Runner();  /* StepRunner::Run */
    run Runner();  /* its restart, or a second Run of the same biz_key */
#ifdef FOUR_RUNNERS
    run Runner();  /* a deeper run: 17 million states, not in the test */
#endif
    run Runner()   /* a Worker's ResumeDue */
  }
}

/* No external effect twice. */
ltl once { [] !dup_effect }
/* No re-send while an earlier send's outcome is unresolved: query comes first. */
ltl query_first { [] !blind_send }
/* A SUCCESS step is never redone, and stays SUCCESS. */
ltl no_redo { [] !redo }
ltl success_stays {
  [] ((st[0] == SUCCESS -> [] (st[0] == SUCCESS)) && (st[1] == SUCCESS -> [] (st[1] == SUCCESS)))
}
/* No step is skipped or marked done without its effect: step 2 runs only after
   step 1, and a SUCCESS operation did each effect once. */
ltl in_order {
  [] ((st[0] == SUCCESS -> effects == 1) && (local_effects > 0 -> st[0] == SUCCESS)
      && (op == OP_SUCCESS -> (st[1] == SUCCESS && local_effects == 1)))
}
