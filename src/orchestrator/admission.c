/* admission: see admission.h. */
#include "admission.h"

#include <string.h>

#define START_GAIN 1.1   /* the start phase doubles while the rate grows this much */
#define PROBE_EVERY 4    /* a cycle: PROBE_EVERY - 1 windows at the level, one above */
#define PROBE_STEP 1.5   /* the probe's limit: this times the level */
#define SHORT 0.96       /* the level finished less than this share of the probe: ... */
#define GROW 1.3         /* ... it grows by this much */
#define AMPLE 0.99       /* it finished more than this share: ... */
#define SHRINK 0.9       /* ... it shrinks by this much */
#define SETTLE_MS 200    /* a window's first part still shows the limit before */
#define RATE_DECAY 0.9   /* best_rate forgets 10 % a window */
#define RETRY_MAX_S 30

static double dmax(double x, double y)
{
	return x > y ? x : y;
}

/* The least integer at least v (v >= 0 here). */
static int64_t up(double v)
{
	int64_t i = (int64_t)v;

	return (double)i < v ? i + 1 : i;
}

void admission_init(struct admission *a, int64_t max_inflight, int64_t step_timeout_ms,
		    int64_t now_ms)
{
	memset(a, 0, sizeof(*a));
	a->fixed = max_inflight;
	a->step_timeout_ms = step_timeout_ms;
	a->win_start_ms = now_ms;
	a->applied_ms = now_ms;
	a->phase = ADMISSION_START;
	a->level = ADMISSION_START_LIMIT;
	a->limit = ADMISSION_START_LIMIT;
}

int64_t admission_inflight(const struct admission *a)
{
	int64_t n = a->base + a->net + a->reserved;

	return n > 0 ? n : 0;
}

int64_t admission_limit(const struct admission *a)
{
	if (a->fixed >= 0)
		return a->fixed;
	double limit = a->limit;
	double cap = a->best_rate * (double)a->step_timeout_ms / 1000.0 * ADMISSION_DEADLINE_SHARE;

	if (a->best_rate > 0 && cap < limit)
		limit = cap;
	if (limit < ADMISSION_FLOOR)
		limit = ADMISSION_FLOOR;
	return up(limit);
}

int admission_retry_after_s(const struct admission *a)
{
	double excess = (double)(admission_inflight(a) - admission_limit(a) + 1);
	double rate = a->rate > 1 ? a->rate : 1;
	if (!(excess > 0))
		return 1;
	if (excess / rate >= RETRY_MAX_S)
		return RETRY_MAX_S;
	int64_t s = up(excess / rate);

	return s < 1 ? 1 : (int)s;
}

static double floor_at(double v)
{
	return v < ADMISSION_FLOOR ? ADMISSION_FLOOR : v;
}

/* The decision at the end of a window in which the limit bound. */
static void decide(struct admission *a, double rate)
{
	if (a->phase == ADMISSION_START) {
		if (a->start_rate <= 0 || rate > a->start_rate * START_GAIN) {
			/* more concurrency still finishes more: double */
			a->start_rate = rate;
			a->limit *= 2;
			return;
		}
		/* it did not: hold here, the plateau is what it finishes now */
		a->phase = ADMISSION_HOLD;
		a->level = a->limit;
		a->window = 0;
		a->level_done = 0;
		return;
	}
	if (a->window < PROBE_EVERY - 1) {
		/* a window at the level */
		a->level_done += rate;
		a->window++;
		a->limit = a->window == PROBE_EVERY - 1 ? a->level * PROBE_STEP : a->level;
		return;
	}
	/* the probe, against the windows at the level just before it */
	double at_level = a->level_done / (PROBE_EVERY - 1);

	a->plateau = rate;
	if (at_level < SHORT * rate)
		a->level *= GROW;
	else if (at_level > AMPLE * rate)
		a->level = floor_at(a->level * SHRINK);
	a->window = 0;
	a->level_done = 0;
	a->limit = a->level;
}

/*
 * The end of a window in which the limit did not bind: the demand, or what
 * reaches the orchestrator of it, is below the limit. A doubling in the
 * start, or a probe, that the demand did not fill has its answer: more
 * concurrency is not needed. Otherwise nothing is learnt.
 */
static void unfilled(struct admission *a)
{
	if (a->phase == ADMISSION_START && a->limit > ADMISSION_START_LIMIT) {
		a->phase = ADMISSION_HOLD;
		a->level = a->limit / 2;
	} else if (a->phase == ADMISSION_HOLD && a->window == PROBE_EVERY - 1) {
		a->level = floor_at(a->level * SHRINK);
	} else {
		return;
	}
	a->window = 0;
	a->level_done = 0;
	a->limit = a->level;
}

void admission_tick(struct admission *a, int64_t now_ms)
{
	if (now_ms - a->win_start_ms < ADMISSION_WINDOW_MS)
		return;
	if (a->win_span_ms > 0) {
		a->rate = a->win_done * 1000.0 / (double)a->win_span_ms;
		a->best_rate = dmax(a->rate, a->best_rate * RATE_DECAY);
		/* the limit bound through at least half of the window */
		if (a->fixed < 0 && 2 * a->win_full >= a->win_intervals)
			decide(a, a->rate);
		else if (a->fixed < 0)
			unfilled(a);
	}
	a->win_done = 0;
	a->win_span_ms = 0;
	a->win_intervals = 0;
	a->win_full = 0;
	a->win_start_ms = now_ms;
}

bool admission_try(struct admission *a, int64_t now_ms)
{
	admission_tick(a, now_ms);
	if (a->fixed == 0) {
		a->reserved++;
		return true;
	}
	int64_t limit = admission_limit(a), n = admission_inflight(a);

	if (n >= limit) {
		a->refused++;
		return false;
	}
	a->reserved++;
	return true;
}

void admission_settle(struct admission *a, bool created)
{
	a->reserved--;
	if (created) {
		a->net++;
		a->acks++;
	}
}

void admission_end_begin(struct admission *a)
{
	a->ending++;
}

void admission_end_done(struct admission *a, bool applied)
{
	a->ending--;
	if (applied) {
		a->net--;
		a->acks++;
	}
}

void admission_count_sent(struct admission *a, int64_t now_ms)
{
	a->counting = true;
	a->sent_ms = now_ms;
	a->sent_acks = a->acks;
	a->sent_net = a->net;
	a->sent_busy = a->reserved + a->ending;
}

void admission_count_failed(struct admission *a)
{
	a->counting = false;
}

void admission_refreshed(struct admission *a, int64_t now_ms, int64_t inflight, int64_t created,
			 bool new_mark)
{
	if (!a->counting)
		return;
	a->counting = false;

	/*
	 * What may have committed on either side of the count's snapshot: the
	 * starts and ends answered while it ran, and those on their way.
	 */
	int64_t busy = a->reserved + a->ending;
	int64_t unsure = (a->acks - a->sent_acks) + (busy > a->sent_busy ? busy : a->sent_busy);
	int64_t local = a->base + a->sent_net;
	int64_t diff = inflight - local;

	if (unsure == 0 || diff > unsure || -diff > unsure) {
		/* what this instance answered while the count ran counts as after it */
		a->base = inflight;
		a->net -= a->sent_net;
		a->applied_ms = now_ms;
	}

	/* the sagas that ended since the last count, whichever instance ended them */
	if (a->have_prev && !new_mark && a->prev_ms >= a->win_start_ms + SETTLE_MS &&
	    now_ms > a->prev_ms) {
		double done = (double)(created - a->prev_created) - (double)(inflight - a->prev_inflight);

		a->win_done += done > 0 ? done : 0;
		a->win_span_ms += now_ms - a->prev_ms;
		/* full: a start was refused since the last count, or the limit is reached */
		a->win_intervals++;
		a->win_full += a->refused > a->prev_refused ||
			       admission_inflight(a) >= admission_limit(a);
	}
	a->prev_refused = a->refused;
	a->have_prev = true;
	a->prev_ms = now_ms;
	a->prev_created = created;
	a->prev_inflight = inflight;
	admission_tick(a, now_ms);
}
