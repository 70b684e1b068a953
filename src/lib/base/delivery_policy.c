/* delivery_policy: see delivery_policy.h. */
#include "delivery_policy.h"

#include "backoff.h"

enum delivery_outcome delivery_policy_http(int status)
{
	if (status >= 200 && status < 300)
		return DELIVERY_OK;
	if (status == 0 || status >= 500 || status == 408 || status == 429)
		return DELIVERY_RETRYABLE;
	return DELIVERY_REFUSED;
}

bool delivery_policy_breaker_ok(enum delivery_outcome o)
{
	/* only the peer's own trouble counts against its circuit */
	return o != DELIVERY_RETRYABLE;
}

struct delivery_decision delivery_policy_decide(const struct delivery_policy *p,
						enum delivery_outcome o, int attempts,
						int64_t wait_ms, int64_t now_ms,
						double (*random)(void))
{
	struct delivery_decision d = { .next = DELIVERY_RETRY, .attempts = 1, .at_ms = now_ms };

	switch (o) {
	case DELIVERY_OK:
		d.next = DELIVERY_DONE;
		d.reason = DELIVERY_DELIVERED;
		return d;
	case DELIVERY_NOT_ATTEMPTED:
		d.reason = DELIVERY_CIRCUIT_OPEN;
		d.attempts = 0;
		d.delay_ms = wait_ms > 0 ? wait_ms : 0;
		break;
	case DELIVERY_REFUSED:
		d.next = DELIVERY_DEAD;
		d.reason = DELIVERY_REFUSAL;
		return d;
	case DELIVERY_RETRYABLE:
	default:
		if (attempts + 1 >= p->max_attempts) {
			d.next = DELIVERY_DEAD;
			d.reason = DELIVERY_EXHAUSTED;
			return d;
		}
		if (wait_ms >= 0) {
			d.reason = DELIVERY_PEER_ASKED;
			d.delay_ms = wait_ms < p->cap_ms ? wait_ms : p->cap_ms;
		} else {
			d.reason = DELIVERY_BACKOFF;
			d.delay_ms = backoff_delay_ms(p->base_ms, p->cap_ms, attempts + 1, random());
		}
		break;
	}
	d.at_ms = now_ms + d.delay_ms;
	return d;
}

const char *delivery_reason_name(enum delivery_reason r)
{
	switch (r) {
	case DELIVERY_DELIVERED:
		return "delivered";
	case DELIVERY_BACKOFF:
		return "backoff";
	case DELIVERY_PEER_ASKED:
		return "retry_after";
	case DELIVERY_CIRCUIT_OPEN:
		return "circuit_open";
	case DELIVERY_REFUSAL:
		return "refused";
	case DELIVERY_EXHAUSTED:
		return "attempts_exhausted";
	}
	return "?";
}
