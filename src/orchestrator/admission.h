/*
 * admission: whether a new saga may start now (POST /orders), so that
 * pgsaga refuses the excess at the door (429 overloaded) instead of
 * accepting every start and letting the step deadlines cancel what it
 * accepted. Pure: no I/O, the clock is passed in (milliseconds, monotonic);
 * orders.c feeds it and saga_engine.c tells it when a saga ends.
 *
 * What is counted: the sagas in flight (not terminal), across every
 * orchestrator. One instance knows the number exactly in memory: it starts
 * from the database's count, reserves one before a start's insert
 * (admission_try), keeps it when the insert made a new saga and gives it
 * back when it was a replay or failed (admission_settle), and takes one off
 * for each terminal transition it commits (admission_end_*). Other
 * instances start and end sagas too, so orders.c counts the sagas in flight
 * in the database every ADMISSION_REFRESH_MS (an index-only count on the
 * partial index of unfinished sagas) and hands the result to
 * admission_refreshed. The count is taken while transitions commit, so it
 * may be off by those whose commit and acknowledgement straddle it; it
 * replaces the local figure only when it cannot be explained by them: when
 * nothing of this instance was on its way while it ran, or when it differs
 * by more than what was. One instance therefore keeps its exact figure
 * (ADMISSION_MAX_INFLIGHT=N holds exactly), and several see each other's
 * sagas within a refresh: between two refreshes, each of n instances may
 * admit up to the free room it saw, so the total may exceed the limit by
 * (n - 1) times that room for at most ADMISSION_REFRESH_MS.
 *
 * The limit, unless set by hand. Little's law (in flight = completion rate
 * x duration) does not give a limit by itself: the measured duration grows
 * with what is in flight, so any limit explains itself. Nor does the
 * shortest duration (a BBR or Vegas estimate of the pipe): pgsaga's
 * throughput rises with concurrency well past it, because group commit
 * shares one WAL flush among the statements that wait together, so a limit
 * of twice the bandwidth-delay product holds half the capacity. What the
 * deployment finishes per second is measured directly instead, and the
 * limit climbs the throughput curve until more concurrency no longer
 * finishes noticeably more.
 *
 * - The completion rate is global: from two counts in one snapshot, the
 *   sagas in flight C and the sagas created since a mark K, the sagas that
 *   ended between two refreshes are dK - dC, whichever instance ended them.
 * - A decision window is ADMISSION_WINDOW_MS. A window teaches something
 *   only when the limit bound through at least half of it (between two
 *   counts a start was refused, or the sagas in flight were at the limit):
 *   else the rate measures the demand, not the deployment, and the limit
 *   stays, except that a probe the demand does not fill counts as one
 *   that gained nothing.
 * - Start: from ADMISSION_START_LIMIT, the limit doubles each bound window
 *   while the rate grows by more than 10 %; the first window that does not
 *   ends the start, at that limit; a doubling the demand does not fill
 *   ends it at the limit before.
 * - Then cycles of four windows: three at the level, one probe at 1.5 times
 *   it. After the probe, the level grows by 30 % when it finished less
 *   than 96 % of what the probe finished (more concurrency still pays), and
 *   shrinks by 10 % when it finished more than 99 % (more concurrency only
 *   waits); else it stays. Erring high costs latency, erring low costs
 *   throughput that never comes back: the rule leans high. The level thus
 *   settles where half again as much concurrency gains only a few per
 *   cent: near the top of the throughput
 *   curve (this machine's is shallow, group commit rewarding concurrency
 *   far), with the latency that level brings. Both sides of each
 *   comparison are measured in the same cycle, so the level follows a
 *   deployment that becomes faster or slower within a few cycles; the
 *   first 200 ms of each window, which still show the limit before, are
 *   left out of its rate. Windows of two seconds: on a machine shared with
 *   other work, a one-second rate is too noisy to tell 3 % apart.
 * - Cap: the limit never exceeds what finishes within a quarter of the
 *   step deadline at the best rate recently measured (decaying 10 % a
 *   window): by Little's law, the sagas accepted then last on average a
 *   quarter of STEP_TIMEOUT_MS, so a deployment that slows down suddenly
 *   (a peer answering slowly) refuses before its deadlines cancel what it
 *   accepted.
 * - Floor: ADMISSION_FLOOR, so that a deployment that finishes nothing
 *   for a while still admits work.
 *
 * Retry-After: the whole seconds the excess needs to finish at the
 * measured rate, at least 1, at most 30.
 */
#ifndef PGSAGA_ADMISSION_H
#define PGSAGA_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#define ADMISSION_REFRESH_MS 200
#define ADMISSION_WINDOW_MS 2000
#define ADMISSION_FLOOR 16
#define ADMISSION_START_LIMIT 64
#define ADMISSION_DEADLINE_SHARE 0.25

enum admission_phase { ADMISSION_START, ADMISSION_HOLD };

struct admission {
	int64_t fixed;           /* > 0: limit set by hand; 0: off; < 0: adaptive */
	int64_t step_timeout_ms;

	/* in flight = base + net + reserved */
	int64_t base;            /* the database's count, when it was last taken in */
	int64_t net;             /* sagas this instance started minus ended, since then */
	int64_t reserved;        /* starts admitted whose insert has not answered yet */
	int64_t ending;          /* terminal transitions sent, not answered yet */
	int64_t acks;            /* starts and ends answered (moves on every change of net) */
	bool counting;           /* a count was sent and has not come back */
	int64_t sent_ms, sent_acks, sent_net, sent_busy;
	int64_t applied_ms;      /* when a count last replaced the local figure */

	/* completions (global), from successive counts */
	bool have_prev;
	int64_t prev_inflight, prev_created, prev_ms;
	double win_done;         /* sagas ended in the current window's settled part */
	int64_t win_span_ms;     /* ... and how long that part was */
	int64_t win_start_ms;
	int win_intervals;       /* counts in the window's settled part ... */
	int win_full;            /* ... and those that found the limit reached */
	int64_t prev_refused;    /* refused at the last count */
	double rate;             /* sagas/s ended in the last window */
	double best_rate;        /* best recent rate, decaying */

	/* adaptive limit */
	enum admission_phase phase;
	double level;            /* the limit outside probes */
	double limit;            /* the limit of the current window */
	double start_rate;       /* ADMISSION_START: rate at the previous level */
	double plateau;          /* the last probe's rate: what more concurrency finishes */
	int window;              /* ADMISSION_HOLD: which window of the probe cycle */
	double level_done;       /* ... and the rates of the cycle's windows at the level */

	int64_t refused;
};

/* max_inflight: ADMISSION_MAX_INFLIGHT (> 0 by hand, 0 off, < 0 adaptive). */
void admission_init(struct admission *a, int64_t max_inflight, int64_t step_timeout_ms,
		    int64_t now_ms);

/*
 * A start arrives: true reserves one saga in flight (then admission_settle
 * once its insert answered), false refuses it (counted).
 */
bool admission_try(struct admission *a, int64_t now_ms);
/* The insert answered: created is true when it made a new saga. */
void admission_settle(struct admission *a, bool created);

/* A terminal transition is sent; then it answered (applied: it committed). */
void admission_end_begin(struct admission *a);
void admission_end_done(struct admission *a, bool applied);

/* A count is sent to the database (orders.c does so every ADMISSION_REFRESH_MS). */
void admission_count_sent(struct admission *a, int64_t now_ms);
/*
 * Its answer: inflight, the sagas in flight; created, the sagas created
 * since the mark; new_mark: the mark moved with this count (created is then
 * a new series).
 */
void admission_refreshed(struct admission *a, int64_t now_ms, int64_t inflight, int64_t created,
			 bool new_mark);
/* The count failed: the next one is sent as usual. */
void admission_count_failed(struct admission *a);

/* Closes decision windows that are over; admission_try and _refreshed call it. */
void admission_tick(struct admission *a, int64_t now_ms);

int64_t admission_inflight(const struct admission *a);
/* The limit in force; 0 when admission control is off. */
int64_t admission_limit(const struct admission *a);
/* Whole seconds a refused client should wait: 1..30. */
int admission_retry_after_s(const struct admission *a);

#endif
