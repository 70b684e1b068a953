/* breaker: see breaker.h. */
#include "breaker.h"

void breaker_init(struct breaker *b, int threshold, int64_t open_ms)
{
	*b = (struct breaker){ .threshold = threshold > 0 ? threshold : 1, .open_ms = open_ms };
}

bool breaker_allow(struct breaker *b, int64_t now_ms)
{
	switch (b->state) {
	case BREAKER_CLOSED:
		return true;
	case BREAKER_OPEN:
		if (now_ms - b->opened_at < b->open_ms)
			return false;
		b->state = BREAKER_HALF_OPEN;
		b->probing = false;
		/* fall through */
	case BREAKER_HALF_OPEN:
		if (b->probing)
			return false;
		b->probing = true;
		return true;
	}
	return false;
}

void breaker_report(struct breaker *b, bool ok, int64_t now_ms)
{
	if (ok) {
		b->state = BREAKER_CLOSED;
		b->failures = 0;
		b->probing = false;
		return;
	}
	if (b->state == BREAKER_HALF_OPEN || ++b->failures >= b->threshold) {
		b->state = BREAKER_OPEN;
		b->opened_at = now_ms;
		b->probing = false;
		b->failures = 0;
	}
}

int64_t breaker_retry_at(const struct breaker *b, int64_t now_ms)
{
	if (b->state != BREAKER_OPEN)
		return now_ms;
	return b->opened_at + b->open_ms;
}

const char *breaker_state_name(const struct breaker *b, int64_t now_ms)
{
	if (b->state == BREAKER_CLOSED)
		return "closed";
	if (b->state == BREAKER_HALF_OPEN || breaker_retry_at(b, now_ms) <= now_ms)
		return "half_open";
	return "open";
}
