/*
 * grpc.health.v1.Health (Check and Watch) and server reflection.  The
 * service answers SERVING until SIGTERM (svc_set_draining()), NOT_SERVING
 * after, for the whole server and for each of its services by name.
 */
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "grpc/health/v1/health.pb-c.h"
#include "service_int.h"

/* ---------------------------------------------------------------------- */
/* grpc.health.v1.Health/Check                                             */

int svc_health(struct svc *s, const struct svc_call *call, const uint8_t *req,
               size_t len, uint8_t **resp, size_t *resp_len, struct sd_diag *d)
{
    Grpc__Health__V1__HealthCheckRequest *rq;
    Grpc__Health__V1__HealthCheckResponse out =
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    const char *svc;
    int rv;

    (void)call;
    rq = grpc__health__v1__health_check_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "HealthCheckRequest: not a valid message");
    svc = rq->service != NULL ? rq->service : "";
    if (svc[0] != '\0' && strcmp(svc, "shardd.v1.Planner") != 0 &&
        strcmp(svc, "shardd.v1.Admin") != 0) {
        rv = sd_diag_set(d, SD_ENOENT, "service: unknown service \"%.64s\"",
                         svc);
        goto out_request;
    }
    out.status =
        atomic_load(&s->draining)
            ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
            : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    rv = wire_pack(&out.base, resp, resp_len, d);
out_request:
    grpc__health__v1__health_check_request__free_unpacked(rq, NULL);
    return rv;
}

/* What a health Watch last sent. */
struct health_watch {
    int sent; /* the ServingStatus sent, -1 before the first */
};

int svc_health_watch(struct svc *s, const uint8_t *req, size_t len,
                     void **state, uint8_t **msg, size_t *msg_len, bool *last,
                     struct sd_diag *d)
{
    Grpc__Health__V1__HealthCheckResponse out =
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    struct health_watch *w = *state;
    int now;

    *msg = NULL;
    *last = false;
    if (w == NULL) {
        /* The request is checked like Check's; its answer is the first. */
        uint8_t *first;
        size_t n;
        int rv = svc_health(s, NULL, req, len, &first, &n, d);

        if (rv != 0)
            return rv;
        free(first);
        w = malloc(sizeof(*w));
        if (w == NULL)
            return sd_diag_set(d, SD_ENOMEM, "out of memory");
        w->sent = -1;
        *state = w;
    }
    now =
        atomic_load(&s->draining)
            ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
            : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    if (now == w->sent)
        return 0; /* nothing new */
    out.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)now;
    w->sent = now;
    return wire_pack(&out.base, msg, msg_len, d);
}

/* ---------------------------------------------------------------------- */
/* Reflection                                                              */

int svc_reflect(struct svc *s, const uint8_t *req, size_t len, uint8_t **resp,
                size_t *resp_len, struct sd_diag *d)
{
    return reflect_answer(s->reflect, req, len, resp, resp_len, d);
}
