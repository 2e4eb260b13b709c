/*
 * shardctl's admin commands and health check (online.h): status, models,
 * activate, profiler, retrain, job (and watching one) and health, as
 * human text or, with --json, the response message (rpc_json.c).
 *
 * Exit status: rpc_exit_code() for a failed call; a job or health check
 * that reports failure is 1.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "grpc/health/v1/health.pb-c.h"
#include "online.h"
#include "shardd/v1/admin.pb-c.h"

#define GIB ((double)(1ull << 30))

/* ---------------------------------------------------------------------- */
/* Admin: status, models, activate, profiler                               */

/*
 * An enum value's name for people: "JOB_STATE_RUNNING" -> "running".  The
 * API's enums prefix every value with the enum's name, which their
 * UNSPECIFIED value (number 0) shows; other enums keep their names.
 */
static const char *enum_word(const ProtobufCEnumDescriptor *ed, int v,
                             char *buf, size_t cap)
{
    static const char unspec[] = "UNSPECIFIED";
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(ed, v);
    const ProtobufCEnumValue *zero =
        protobuf_c_enum_descriptor_get_value(ed, 0);
    const char *name;
    size_t i, plen = 0;

    if (ev == NULL) {
        snprintf(buf, cap, "%d", v);
        return buf;
    }
    name = ev->name;
    if (zero != NULL && strlen(zero->name) > strlen(unspec) &&
        strcmp(zero->name + strlen(zero->name) - strlen(unspec), unspec) == 0)
        plen = strlen(zero->name) - strlen(unspec);
    if (plen > 0 && strncmp(name, zero->name, plen) == 0)
        name += plen;
    for (i = 0; name[i] != '\0' && i + 1 < cap; i++)
        buf[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a'
                                                         : name[i]);
    buf[i] = '\0';
    return buf;
}

/* Local time of a _unix_ms field; "-" for 0 (not reached). */
static const char *time_text(int64_t unix_ms, char *buf, size_t cap)
{
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;

    if (unix_ms <= 0)
        return "-";
    if (localtime_r(&t, &tm) == NULL ||
        strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, cap, "%lld ms", (long long)unix_ms);
    return buf;
}

int online_status(struct online *on)
{
    Shardd__V1__GetStatusRequest rq = SHARDD__V1__GET_STATUS_REQUEST__INIT;
    Shardd__V1__GetStatusResponse *r = NULL;
    char word[32];
    size_t i;
    int rv;

    rv = online_call(on, "/shardd.v1.Admin/GetStatus", &rq.base,
                     &shardd__v1__get_status_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    if (on->o->json) {
        rv = online_print_json(&r->base);
        goto out_response;
    }
    printf("shardd %s at %s, up %llu h %02llu min\n", r->version, on->addr,
           (unsigned long long)(r->uptime_s / 3600),
           (unsigned long long)(r->uptime_s / 60 % 60));
    printf("backend: %s, %zu device%s\n", r->backend, r->n_devices,
           r->n_devices == 1 ? "" : "s");
    for (i = 0; i < r->n_devices; i++) {
        printf("  %3d  %s", (int)r->devices[i]->index, r->devices[i]->name);
        if (r->devices[i]->memory_bytes > 0)
            printf(" (%.1f GiB)", (double)r->devices[i]->memory_bytes / GIB);
        printf("\n");
    }
    printf("profile: %s, active model: %s\n", r->profile,
           r->active_model_version[0] ? r->active_model_version : "none");
    if (strcmp(r->serving_profile, r->profile) != 0)
        printf("serving: model %s of profile %s (requests naming no "
               "profile)\n",
               r->serving_model_version[0] ? r->serving_model_version : "none",
               r->serving_profile);
    if (r->serving_model_members > 1)
        printf("serving model: an ensemble of %u (every plan carries their "
               "spread)\n",
               (unsigned)r->serving_model_members);
    printf("profiler: %s; samples: %llu compute, %llu comm\n",
           enum_word(&shardd__v1__profiler_state__descriptor, (int)r->profiler,
                     word, sizeof(word)),
           (unsigned long long)r->compute_samples,
           (unsigned long long)r->comm_samples);
    printf("jobs: %u queued, %u running\n", (unsigned)r->jobs_queued,
           (unsigned)r->jobs_running);
    rv = online_finish_stdout();
out_response:
    shardd__v1__get_status_response__free_unpacked(r, NULL);
    return rv;
}

/* A MAPE for people: "4.21%", or "-" where the model has none. */
static const char *mape_text(double mape, char *buf, size_t cap)
{
    if (!(mape > 0))
        return "-";
    snprintf(buf, cap, "%.2f%%", 100 * mape);
    return buf;
}

int online_models(struct online *on)
{
    Shardd__V1__ListModelsRequest rq = SHARDD__V1__LIST_MODELS_REQUEST__INIT;
    Shardd__V1__ListModelsResponse *r = NULL;
    char when[32], mape[32], comm[32], samples[48];
    int wv = 7, wp = 7;
    size_t i;
    int rv;

    rq.profile = mstr(on->o->profile != NULL ? on->o->profile : "");
    rq.limit = (uint32_t)on->o->limit;
    if (on->o->kind != NULL && strcmp(on->o->kind, "policy") == 0)
        rq.kind = SHARDD__V1__MODEL_KIND__MODEL_KIND_POLICY;
    else if (on->o->kind != NULL && strcmp(on->o->kind, "compute") != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "models: --kind \"%s\" is neither compute nor policy",
                        on->o->kind);
    rv = online_call(on, "/shardd.v1.Admin/ListModels", &rq.base,
                     &shardd__v1__list_models_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    if (on->o->json) {
        rv = online_print_json(&r->base);
        goto out_response;
    }
    if (r->n_models == 0) {
        printf("no models%s%s\n", rq.profile[0] ? " for profile " : "",
               rq.profile);
        rv = online_finish_stdout();
        goto out_response;
    }
    for (i = 0; i < r->n_models; i++) {
        if ((int)strlen(r->models[i]->version) > wv)
            wv = (int)strlen(r->models[i]->version);
        if ((int)strlen(r->models[i]->profile) > wp)
            wp = (int)strlen(r->models[i]->profile);
    }
    printf("  %-*s  %-7s  %-*s  %-19s  %8s  %9s  %s\n", wv, "version", "kind",
           wp, "profile", "created", "MAPE", "comm MAPE",
           "samples (train/val)");
    for (i = 0; i < r->n_models; i++) {
        const Shardd__V1__ModelInfo *m = r->models[i];
        bool policy = m->kind == SHARDD__V1__MODEL_KIND__MODEL_KIND_POLICY;

        snprintf(samples, sizeof(samples), "%llu/%llu%s",
                 (unsigned long long)m->train_samples,
                 (unsigned long long)m->validation_samples,
                 policy ? " tasks" : "");
        printf("%c %-*s  %-7s  %-*s  %-19s  %8s  %9s  %s",
               m->active ? '*' : ' ', wv, m->version,
               policy ? "policy" : "compute", wp, m->profile,
               time_text(m->created_unix_ms, when, sizeof(when)),
               mape_text(m->validation_mape, mape, sizeof(mape)),
               mape_text(m->comm_validation_mape, comm, sizeof(comm)), samples);
        if (policy)
            printf("  for model %s, gate %.3fx",
                   m->base_model_version[0] ? m->base_model_version : "?",
                   m->gate_ratio);
        else if (m->members > 1)
            printf("  ensemble of %u", (unsigned)m->members);
        printf("\n");
    }
    printf("(* active; MAPE on held-out measured samples; a policy's gate is "
           "its held-out mean plan cost over size_lookup_greedy's)\n");
    rv = online_finish_stdout();
out_response:
    shardd__v1__list_models_response__free_unpacked(r, NULL);
    return rv;
}

int online_activate(struct online *on)
{
    Shardd__V1__ActivateModelRequest rq =
        SHARDD__V1__ACTIVATE_MODEL_REQUEST__INIT;
    Shardd__V1__ActivateModelResponse *r = NULL;
    int rv;

    rq.version = mstr(on->o->args[1]);
    rv = online_call(on, "/shardd.v1.Admin/ActivateModel", &rq.base,
                     &shardd__v1__activate_model_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    if (on->o->json) {
        rv = online_print_json(&r->base);
    } else {
        printf("model %s is active for profile %s", rq.version,
               r->model != NULL ? r->model->profile : "?");
        if (r->previous_version[0] != '\0')
            printf(" (was %s)\n", r->previous_version);
        else
            printf(" (none was before)\n");
        rv = online_finish_stdout();
    }
    shardd__v1__activate_model_response__free_unpacked(r, NULL);
    return rv;
}

int online_profiler(struct online *on)
{
    Shardd__V1__SetProfilerRequest rq = SHARDD__V1__SET_PROFILER_REQUEST__INIT;
    Shardd__V1__SetProfilerResponse *r = NULL;
    const char *what = on->o->args[1];
    char word[32];
    int rv;

    if (strcmp(what, "pause") != 0 && strcmp(what, "resume") != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "profiler: \"%s\" is neither pause nor resume", what);
    rq.paused = strcmp(what, "pause") == 0;
    rv = online_call(on, "/shardd.v1.Admin/SetProfiler", &rq.base,
                     &shardd__v1__set_profiler_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    if (on->o->json) {
        rv = online_print_json(&r->base);
    } else {
        printf("profiler: %s\n",
               enum_word(&shardd__v1__profiler_state__descriptor,
                         (int)r->profiler, word, sizeof(word)));
        rv = online_finish_stdout();
    }
    shardd__v1__set_profiler_response__free_unpacked(r, NULL);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Jobs: retrain, job, and watching one                                    */

static bool job_terminal(Shardd__V1__JobState s)
{
    return s == SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
           s == SHARDD__V1__JOB_STATE__JOB_STATE_FAILED ||
           s == SHARDD__V1__JOB_STATE__JOB_STATE_CANCELLED;
}

static void print_job(const Shardd__V1__Job *j)
{
    char kind[32], state[32], t1[32], t2[32], t3[32];

    printf("job %s: %s of profile %s, %s", j->id,
           enum_word(&shardd__v1__job_kind__descriptor, (int)j->kind, kind,
                     sizeof(kind)),
           j->profile,
           enum_word(&shardd__v1__job_state__descriptor, (int)j->state, state,
                     sizeof(state)));
    if (!job_terminal(j->state))
        printf(" (%.0f%%)", 100 * j->progress);
    printf("\n");
    if (j->message[0] != '\0')
        printf("  %s\n", j->message);
    printf("  created %s, started %s, finished %s\n",
           time_text(j->created_unix_ms, t1, sizeof(t1)),
           time_text(j->started_unix_ms, t2, sizeof(t2)),
           time_text(j->finished_unix_ms, t3, sizeof(t3)));
    if (j->result_model_version[0] != '\0')
        printf("  model: %s\n", j->result_model_version);
}

/*
 * Prints a job (human or JSON) and returns the exit status its state
 * gives: 1 for FAILED and CANCELLED (with the reason on stderr), 1 for a
 * watch that ended before the job did, else 0.
 */
static int report_job(const struct online *on, const Shardd__V1__Job *j,
                      bool watched)
{
    char state[32];
    int rv;

    if (on->o->json) {
        rv = online_print_json(&j->base);
    } else {
        print_job(j);
        rv = online_finish_stdout();
    }
    if (rv != 0)
        return rv;
    enum_word(&shardd__v1__job_state__descriptor, (int)j->state, state,
              sizeof(state));
    if (j->state == SHARDD__V1__JOB_STATE__JOB_STATE_FAILED ||
        j->state == SHARDD__V1__JOB_STATE__JOB_STATE_CANCELLED)
        return ctl_fail(1, "job %s %s: %s", j->id, state,
                        j->message[0] ? j->message : "(no reason given)");
    if (watched && !job_terminal(j->state))
        return ctl_fail(1, "job %s: the watch ended while it was %s", j->id,
                        state);
    return 0;
}

/* What a watch keeps between messages. */
struct watch {
    Shardd__V1__Job *last; /* owned */
    bool tty;
    int shown_state, shown_decile;
    struct sd_diag d;
};

/* A progress bar on a terminal; a line per change of state or 10 % in
 * logs. */
static void show_job_progress(struct watch *w, const Shardd__V1__Job *j)
{
    int width = 30, fill, decile;
    double pr = j->progress < 0 ? 0 : j->progress > 1 ? 1 : j->progress;
    char state[32];

    enum_word(&shardd__v1__job_state__descriptor, (int)j->state, state,
              sizeof(state));
    fill = (int)(width * pr);
    decile = (int)(10 * pr);
    if (w->tty) {
        fprintf(stderr, "\r[%.*s%*s] %3.0f%% %-9s %-32.32s", fill,
                "==============================", width - fill, "", 100 * pr,
                state, j->message);
        if (job_terminal(j->state))
            fputc('\n', stderr);
    } else if ((int)j->state != w->shown_state || decile != w->shown_decile) {
        fprintf(stderr, "job %s: %s %.0f%%%s%s\n", j->id, state, 100 * pr,
                j->message[0] ? ": " : "", j->message);
    }
    w->shown_state = (int)j->state;
    w->shown_decile = decile;
}

static int on_job_message(void *ctx, const uint8_t *msg, size_t len)
{
    struct watch *w = ctx;
    Shardd__V1__Job *j = shardd__v1__job__unpack(NULL, len, msg);

    if (j == NULL)
        return sd_diag_set(&w->d, SD_EFORMAT,
                           "WatchJob: a message is not a valid Job");
    show_job_progress(w, j);
    if (w->last != NULL)
        shardd__v1__job__free_unpacked(w->last, NULL);
    w->last = j;
    return 0;
}

/* Follows job id until it ends (WatchJob), then reports it. */
static int watch_job(struct online *on, const char *id)
{
    Shardd__V1__WatchJobRequest rq = SHARDD__V1__WATCH_JOB_REQUEST__INIT;
    struct watch w = {NULL, false, -1, -1, {{0}}};
    struct sd_diag d;
    size_t len;
    uint8_t *buf;
    int rv, status;
    /* A watch lasts as long as the job unless --timeout-s says otherwise. */
    int64_t deadline_ms =
        on->o->timeout_s > 0 ? (int64_t)ceil(on->o->timeout_s * 1e3) : 0;

    rq.id = mstr(id);
    len = protobuf_c_message_get_packed_size(&rq.base);
    buf = malloc(len ? len : 1);
    if (buf == NULL)
        return ctl_fail(1, "job: out of memory");
    protobuf_c_message_pack(&rq.base, buf);
    w.tty = isatty(STDERR_FILENO) != 0;
    rv = rpc_client_stream(on->cli, "/shardd.v1.Admin/WatchJob", buf, len,
                           deadline_ms, on_job_message, &w, &status, &d);
    free(buf);
    if (w.tty && w.last != NULL && !job_terminal(w.last->state))
        fputc('\n', stderr); /* end the bar's line */
    if (rv != 0 && status == RPC_CANCELLED && w.d.msg[0] != '\0')
        rv = ctl_fail(1, "%s", w.d.msg);
    else if (rv != 0)
        rv = ctl_fail(rpc_exit_code(status), "%s", d.msg);
    else if (w.last == NULL)
        rv = ctl_fail(1, "job %s: the watch ended without any state", id);
    else
        rv = report_job(on, w.last, true);
    if (w.last != NULL)
        shardd__v1__job__free_unpacked(w.last, NULL);
    return rv;
}

int online_job(struct online *on)
{
    Shardd__V1__GetJobRequest rq = SHARDD__V1__GET_JOB_REQUEST__INIT;
    Shardd__V1__Job *j = NULL;
    int rv;

    if (on->o->watch)
        return watch_job(on, on->o->args[1]);
    rq.id = mstr(on->o->args[1]);
    rv = online_call(on, "/shardd.v1.Admin/GetJob", &rq.base,
                     &shardd__v1__job__descriptor, (ProtobufCMessage **)&j);
    if (rv != 0)
        return rv;
    rv = report_job(on, j, false);
    shardd__v1__job__free_unpacked(j, NULL);
    return rv;
}

int online_retrain(struct online *on)
{
    Shardd__V1__RetrainRequest rq = SHARDD__V1__RETRAIN_REQUEST__INIT;
    Shardd__V1__Job *j = NULL;
    int rv;

    rq.profile = mstr(on->o->profile != NULL ? on->o->profile : "");
    rq.force = on->o->force;
    if (on->o->kind == NULL || strcmp(on->o->kind, "compute") == 0)
        rq.kind = SHARDD__V1__MODEL_KIND__MODEL_KIND_COMPUTE;
    else if (strcmp(on->o->kind, "policy") == 0)
        rq.kind = SHARDD__V1__MODEL_KIND__MODEL_KIND_POLICY;
    else
        return ctl_fail(CTL_EXIT_USAGE,
                        "retrain: --kind \"%s\" is neither compute nor "
                        "policy",
                        on->o->kind);
    rv = online_call(on, "/shardd.v1.Admin/Retrain", &rq.base,
                     &shardd__v1__job__descriptor, (ProtobufCMessage **)&j);
    if (rv != 0)
        return rv;
    if (on->o->wait && !job_terminal(j->state)) {
        if (!on->o->json)
            fprintf(stderr, "job %s started; watching it\n", j->id);
        rv = watch_job(on, j->id);
    } else {
        rv = report_job(on, j, false);
    }
    shardd__v1__job__free_unpacked(j, NULL);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* health                                                                  */

int online_health(struct online *on)
{
    Grpc__Health__V1__HealthCheckRequest rq =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *r = NULL;
    const ProtobufCEnumValue *ev;
    const char *name;
    int rv;

    rq.service = mstr(on->o->nargs > 1 ? on->o->args[1] : "");
    rv = online_call(on, "/grpc.health.v1.Health/Check", &rq.base,
                     &grpc__health__v1__health_check_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    ev = protobuf_c_enum_descriptor_get_value(
        &grpc__health__v1__health_check_response__serving_status__descriptor,
        (int)r->status);
    name = ev != NULL ? ev->name : "UNKNOWN";
    if (on->o->json) {
        rv = online_print_json(&r->base);
    } else {
        printf("%s\n", name);
        rv = online_finish_stdout();
    }
    if (rv == 0 &&
        r->status !=
            GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING)
        rv = ctl_fail(1, "shardd at %s is %s%s%s", on->addr, name,
                      rq.service[0] ? " for " : "", rq.service);
    grpc__health__v1__health_check_response__free_unpacked(r, NULL);
    return rv;
}
