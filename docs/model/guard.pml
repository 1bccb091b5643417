/*
 * The guard's lease protocol (include/idem/guard.h, docs/openapi.yaml), one key, checked with spin.
 *
 *   claim (Guard::Claim)  -> acquired(token, takeover) | replayed | cached_failure | in_progress
 *   complete / fail       -> Guard::Finish: conditional on the fencing token
 *   attach (wait_ms)      -> http::Api::Claims / Poll / ClaimAnswer
 *
 * The store is the one record of the key, and every store call is one atomic
 * step: a transaction that reads the row locked and writes it (InsertOrLoad +
 * Decide + Replace + Commit; Load + checks + Replace + Commit), as every store
 * implements them (a row lock or the single writer). Clients are processes that
 * may stop at any point (a crash; a restart is another client with the same
 * key), may lose any answer (a 503 after the commit) and retry. Time is
 * nondeterministic: a live lease may run out at any moment, but not while its
 * holder is still between its claim and the end of its external call (the
 * lease is longer than the call: the documented assumption). -DNO_LEASE_BOUND
 * drops that assumption and shows what it is for.
 *
 * Seeded bugs (each must be found):
 *   -DBUG_NO_TOKEN_CHECK     complete/fail do not compare the fencing token
 *   -DBUG_TAKEOVER_NO_QUERY  a takeover re-sends without probing first
 *   -DBUG_ATTACH_EARLY       a waiter answers from the record once the lease ends
 *
 * Properties: the ltl blocks at the end; docs/model/README.md maps every part
 * to the code.
 */

/* Record states (include/idem/record.h); NONE: no record yet. */
#define NONE 0
#define PROC 1
#define SUCC 2
#define FAIL 3
#define REL  4

/* Answers. */
#define ACQ      1
#define REPLAY   2
#define CACHED   3
#define INPROG   4
#define LOST     5  /* the answer did not reach the client */
#define OK       6
#define LEASE_LOST 7
#define EXISTS   8
#define NOTFOUND 9
#define REJECT   10 /* the external system surely did nothing, for good */
#define RETRY_LATER 11 /* the external system surely did nothing, try again */
#define CRASHED  12

#define FAILED_ANSWER 255 /* the key's answer is its cached failure */
#define MAX_TRIES 2       /* claims per client */

/* The store: the key's record. */
byte rec_state = NONE;
byte rec_token = 0;
bool rec_live = false;   /* lease_until > now */
byte rec_result = 0;     /* SUCCEEDED: the result bytes (here: the effect's payload) */

/* The external system the holders call. */
byte effects = 0;        /* how often the effect happened */
byte payload = 0;        /* what its query returns once it happened: the sender's token */
bool unresolved = false; /* a send whose outcome nobody has observed or queried since */

/* Ghosts. */
byte granted = 0;        /* the latest token a claim handed out */
byte decided = 0;        /* the first answer a client was given for the key */
byte in_window = 0;      /* holders between their claim and the end of their call */

/* Violations, each the subject of one ltl property. */
bool dup_effect = false;
bool blind_send = false;
bool stale_finish = false;
bool two_results = false;
bool bad_attach = false;

/* A client is given `v` as the key's answer: every answer must be the same. */
inline decide(v) {
  if
  :: decided == 0 -> decided = v
  :: decided != 0 && decided != v -> two_results = true
  :: else -> skip
  fi
}

/* Guard::Claim: one transaction deciding on the record (Decide in guard.cc). */
inline claim(tok, tko, res, out) {
  atomic {
    if
    :: rec_state == NONE || rec_state == REL ->
       rec_token++; rec_state = PROC; rec_live = true;
       tok = rec_token; tko = false; granted = rec_token; out = ACQ
    :: rec_state == PROC && !rec_live ->
       rec_token++; rec_live = true;
       tok = rec_token; tko = true; granted = rec_token; out = ACQ
    :: rec_state == PROC && rec_live -> out = INPROG
    :: rec_state == SUCC -> res = rec_result; out = REPLAY
    :: rec_state == FAIL -> out = CACHED
    fi;
    if
    :: out == ACQ -> in_window++
    :: else -> skip
    fi;
    /* The commit happened, its answer may not arrive (503). */
    if
    :: skip
    :: out == ACQ -> in_window--; out = LOST
    fi
  }
}

/* Guard::Finish (Complete: final SUCC; Fail: FAIL or REL). */
inline finish(tok, final, v, out) {
  atomic {
    if
    :: rec_state == NONE -> out = NOTFOUND
    :: rec_state == REL && rec_token == tok && final == REL -> out = OK
    :: else ->
       if
#ifdef BUG_NO_TOKEN_CHECK
       :: rec_state == REL -> out = LEASE_LOST
#else
       :: rec_token != tok || rec_state == REL -> out = LEASE_LOST
#endif
       :: else ->
          if
          :: rec_state != PROC ->
             if
             :: rec_state == final && (final != SUCC || rec_result == v) -> out = OK
             :: else -> out = EXISTS
             fi
          :: else ->
             rec_state = final; rec_live = false;
             if
             :: final == SUCC -> rec_result = v
             :: else -> skip
             fi;
             out = OK
          fi
       fi
    fi;
    if
    :: out == OK && tok != granted -> stale_finish = true
    :: else -> skip
    fi;
    if
    :: out == OK && final == SUCC -> decide(v)
    :: out == OK && final == FAIL -> decide(FAILED_ANSWER)
    :: else -> skip
    fi;
    if
    :: skip
    :: out = LOST
    fi
  }
}

/* The external call, as the external system sees it. */
inline send(tok, r) {
  atomic {
    if
    :: r = CRASHED   /* the holder dies before sending */
    :: r = 0
    fi;
    if
    :: r != CRASHED && unresolved -> blind_send = true
    :: else -> skip
    fi;
    if
    :: r == CRASHED -> skip
    :: else ->
       if
       :: effects++; payload = tok;
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
}

/* The probe a takeover makes before re-sending (a claim answered takeover: true). */
inline query(found, res) {
  atomic {
    if
    :: effects > 0 -> found = true; res = payload; in_window--
    :: else -> found = false
    fi;
    unresolved = false
  }
}

proctype Client(bool wait) {
  byte tok = 0, res = 0, out = 0, r = 0, tries = 0;
  bool tko = false, found = false, deadline = false, again = false;

start:
  tries++;
  claim(tok, tko, res, out);
answer:
  if
  :: out == ACQ -> goto held
  :: out == REPLAY ->
     atomic {
       decide(res);
       if
       :: wait && rec_state != SUCC -> bad_attach = true
       :: else -> skip
       fi
     }
     goto done
  :: out == CACHED -> atomic { decide(FAILED_ANSWER) } goto done
  :: out == LOST -> goto retry
  :: out == INPROG && !wait -> goto retry
  :: out == INPROG && wait && deadline -> goto done  /* 409 in_progress after the wait */
  :: out == INPROG && wait && !deadline -> goto waiting
  fi;

waiting:
  /* Api::Poll: plain reads while the lease runs; a change goes through a claim. */
  do
  :: deadline = true; break
  :: atomic { !(rec_state == PROC && rec_live) } -> break
  od;
#ifdef BUG_ATTACH_EARLY
  atomic {
    if
    :: !deadline && rec_state == PROC && !rec_live -> res = rec_result; out = REPLAY
    :: else -> out = 0
    fi
  }
  if
  :: out == REPLAY -> goto answer
  :: else -> skip
  fi;
#endif
  claim(tok, tko, res, out);
  goto answer;

held:
  if
  :: atomic { in_window--; goto done }  /* dies holding the claim */
  :: skip
  fi;
#ifndef BUG_TAKEOVER_NO_QUERY
  if
  :: tko ->
     query(found, res);
     if
     :: found -> goto complete
     :: else -> skip
     fi
  :: else -> skip
  fi;
#endif
  send(tok, r);
  if
  :: r == CRASHED -> goto done
  :: r == OK -> res = tok; goto complete
  :: r == REJECT -> goto fail_final
  :: r == RETRY_LATER -> goto fail_retry
  :: r == LOST -> goto retry  /* outcome unknown: neither complete nor fail */
  fi;

complete:
  finish(tok, SUCC, res, out);
  if
  :: out == LOST && !again -> again = true; goto complete  /* the same call again */
  :: else -> goto done
  fi;

fail_final:
  finish(tok, FAIL, 0, out);
  if
  :: out == LOST && !again -> again = true; goto fail_final
  :: else -> goto done
  fi;

fail_retry:
  finish(tok, REL, 0, out);
  goto retry;

retry:
  if
  :: tries < MAX_TRIES -> goto start
  :: else -> skip
  fi;
done:
  skip
}

/* Time: a live lease runs out, unless its holder is still in its call. */
#ifdef NO_LEASE_BOUND
#define LEASE_BOUND true
#else
#define LEASE_BOUND (in_window == 0)
#endif
active proctype Clock() {
end:
  do
  :: atomic {
       rec_state == PROC && rec_live && LEASE_BOUND -> rec_live = false
     }
  od
}

init {
  atomic {
    run Client(false);
#ifdef THREE_CLIENTS
    run Client(false);  /* a deeper run: 14.6 million states, not in the test */
#endif
    run Client(true)
  }
}

/* No external effect twice. */
ltl once { [] !dup_effect }
/* No send while an earlier send's outcome is unresolved: a query comes in between. */
ltl query_first { [] !blind_send }
/* A stale token never completes (nor fails) a claim. */
ltl fenced { [] !stale_finish }
/* A key never has two results: every answer given for it is the same. */
ltl one_result { [] !two_results }
/* attach (wait_ms) replays only a completed result. */
ltl attach { [] !bad_attach }
/* A decided key stays decided, and its record agrees with the external system. */
ltl durable {
  [] ((rec_state == SUCC -> [] (rec_state == SUCC)) && (rec_state == FAIL -> [] (rec_state == FAIL)))
}
ltl agrees {
  [] ((rec_state == SUCC -> (effects == 1 && rec_result == payload)) && (rec_state == FAIL -> effects == 0))
}
