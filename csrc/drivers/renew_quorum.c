/* The renewal's majority rule (renew_int.h): a round counts only when a
 * quorum of servers extended the lock and the round ended within the
 * validity it extends (Redlock: ttl less the clock drift); the lock is lost
 * once so many servers say its token is gone that no quorum is left. */
#include "renew_int.h"

enum renew_outcome renew_verdict(int yes, int no, int n, int quorum, double elapsed,
                                 double validity) {
    if (yes >= quorum && elapsed < validity)
        return RENEWED;
    if (no > n - quorum)
        return RENEW_LOST;
    return RENEW_RETRY;
}
