"""The native half of the origin index: C/C++ and Go statements read by a tokenizer
(knowledge/origins/extract_native.py), the others data file (`others.json.gz`) and how `load()`
merges it with vLLM's index. Each snippet is a short excerpt of the real source it names."""

from __future__ import annotations

from vllm_pd_doctor.knowledge import origins
from vllm_pd_doctor.knowledge.origins import build
from vllm_pd_doctor.knowledge.origins.extract import PLACEHOLDER as P
from vllm_pd_doctor.knowledge.origins.extract import Statement
from vllm_pd_doctor.knowledge.origins.extract_native import statements, stream_macros

# ai-dynamo/nixl v1.4.0 src/utils/common/nixl_log.h (the macros) and src/core/nixl_agent.cpp
NIXL_LOG_H = """
#define NIXL_ERROR LOG(ERROR)
#define NIXL_PERROR NIXL_ERROR.WithPerror()
#define NIXL_ERROR_FUNC NIXL_ERROR << __FUNCTION__ << ": "
#define NIXL_WARN LOG(WARNING)
#define NIXL_DEBUG VLOG(1)
"""
NIXL_AGENT_CPP = """
nixl_status_t
nixlAgent::createBackend(const nixl_backend_t &type,
                         const nixl_b_params_t &params,
                         nixlBackendH* &bknd_hndl) {

    NIXL_LOCK_GUARD(data->lock);
    // Registering same type of backend is not supported, unlikely and prob error
    if (data->backendEngines_.count(type) != 0) {
        NIXL_ERROR_FUNC << "backend already created for type '" << type << "'";
        return NIXL_ERR_INVALID_PARAM;
    }
    NIXL_DEBUG << "not an index line";
    // NIXL_ERROR << "a comment is no statement";
}

void
nixlAgentData::warnAboutEfaHardwareMismatch() {
    if ((backendEngines_.count("UCX") != 0) && (backendEngines_.count("LIBFABRIC") == 0)) {
        const auto &hw_info = nixl::hwInfo::instance();
        if (hw_info.numEfaDevices > 0) {
            NIXL_WARN
                << hw_info.numEfaDevices
                << " Amazon EFA(s) were detected, but the UCX backend was configured."
                   " For best performance, it's recommended to use the LIBFABRIC backend instead.";
        }
    }
}
"""
# kvcache-ai/Mooncake v0.3.9 mooncake-transfer-engine/src/transport/rdma_transport/worker_pool.cpp (cut)
MOONCAKE_CPP = """
void WorkerPool::performPollCq(int thread_id) {
    for (int i = 0; i < nr_poll; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            LOG(ERROR) << "Worker: Process failed for slice (opcode: " << slice->opcode
                       << ", retry_cnt: " << slice->rdma.retry_cnt
                       << "): " << ibv_wc_status_str(wc[i].status);
        } else {
            LOG(INFO) << "routine";
        }
    }
    if (!ok) throw std::runtime_error("Failed to poll CQ on " + device_name);
}

// (HEAD) mooncake-transfer-engine/src/transfer_engine.cpp: a method defined inside its class
class TransferEngine::ScatterTransferOperation::Impl {
    void complete(size_t range_index, size_t fragment_index,
                  const Status& status) {
        try {
            callback(fragment_index, status);
        } catch (...) {
            LOG(ERROR) << "scatter transfer callback failed";
        }
    }
};
"""
# openucx/ucx v1.20.1 src/ucp/wireup/select.c and src/ucs/sys/init.c (cut)
UCX_C = """
static UCS_F_NOINLINE ucs_status_t ucp_wireup_select_transport(
        const ucp_wireup_select_params_t *select_params,
        const ucp_wireup_criteria_t *criteria, int show_error)
{
    if (!found) {
        if (show_error) {
            ucs_error("no %s transport to %s: %s", criteria->title,
                      address->name, tls_info);
        }
        return UCS_ERR_UNREACHABLE;
    }
    ucs_trace("ep %p: selected for %s", ep, criteria->title);
    ucs_log(log_level, "tcp_ep %p (state=%s): %s(%d) failed: %s", ep, state, op_str, ep->fd, err);
    ucs_log(UCS_LOG_LEVEL_DIAG, "not an index line %d", 1);
    ucs_warn("iface %p: %" PRIx64 " bytes left at %d%%", iface, length, level);
}

static void ucs_check_cpu_flags(void)
{
    if (!(cpu_flags & p_flags->value)) {
        fprintf(stderr, "[%s:%d] FATAL: UCX library was compiled with %s"
                " but CPU does not support it.\\n",
                ucs_get_host_name(), getpid(), p_flags->flag);
        exit(1);
    }
    fprintf(stderr, "%s\\n", usage);
}
"""
# llm-d/llm-d-routing-sidecar v0.3.0 internal/proxy/proxy.go and allowlist.go (cut)
SIDECAR_GO = """
func (s *Server) createRoutes() *http.ServeMux {
	s.decoderProxy.ErrorHandler = func(res http.ResponseWriter, _ *http.Request, err error) {
		// Log errors from the decoder proxy
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			s.logger.Error(err, "waiting for vLLM to be ready")
		default:
			s.logger.Error(err, "http: proxy error")
		}
	}
	s.logger.V(4).Info("debug only", "x", 1)
	return mux
}

// llm-d/llm-d-inference-scheduler v0.8.0 pkg/sidecar/proxy/connector_sglang.go (cut)
func (s *Server) parseSGLangRequest(r *http.Request) (map[string]interface{}, error) {
	if err := json.Unmarshal(body, &requestData); err != nil {
		return nil, fmt.Errorf("failed to unmarshal request body: %w", err)
	}
	return requestData, nil
}

func newAllowlistValidator(ctx context.Context) (*AllowlistValidator, error) {
	config, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf(
			"failed to get Kubernetes config (ensure running in a pod with proper RBAC): %w", err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), av.informer.HasSynced) {
		return fmt.Errorf("failed to sync InferencePool cache within timeout (pool '%s', %d tries)",
			av.poolName, n)
	}
	return av, nil
}
"""


def _by_template(found: list[Statement]) -> dict[str, Statement]:
    return {s.template or "": s for s in found}


def test_cpp_streams_with_the_release_s_own_macros():
    macros = stream_macros(NIXL_LOG_H)
    assert {"NIXL_ERROR", "NIXL_PERROR", "NIXL_ERROR_FUNC", "NIXL_WARN"} <= set(macros)
    assert "NIXL_DEBUG" not in macros  # VLOG: debug, no index line
    got = _by_template(statements(NIXL_AGENT_CPP, "src/core/nixl_agent.cpp", macros))
    assert len(got) == 2, got  # neither the debug line nor the comment
    e = got[f"createBackend: backend already created for type '{P}'"]
    assert (e.kind, e.what, e.function, e.params) == ("log", "ERROR", "nixlAgent::createBackend", ("type",))
    assert e.condition == "data->backendEngines_.count(type) != 0" and e.line == 10
    w = next(s for s in got.values() if s.what == "WARNING")
    assert w.template is not None and w.template.startswith(f"{P} Amazon EFA(s) were detected, but the UCX")
    assert w.params == ("numEfaDevices",) and w.condition == "hw_info.numEfaDevices > 0"
    assert w.function == "nixlAgentData::warnAboutEfaHardwareMismatch" and w.end_line > w.line


def test_glog_streams_and_throws():
    got = _by_template(statements(MOONCAKE_CPP, "worker_pool.cpp"))
    e = got[f"Worker: Process failed for slice (opcode: {P}, retry_cnt: {P}): {P}"]
    assert e.what == "ERROR" and e.function == "WorkerPool::performPollCq"
    assert e.params == ("opcode", "retry_cnt", "text") and e.condition == "wc[i].status != IBV_WC_SUCCESS"
    t = got[f"Failed to poll CQ on {P}"]
    assert (t.kind, t.what, t.params, t.condition) == ("raise", "runtime_error", ("device_name",), "!ok")
    assert "routine" not in got  # LOG(INFO): routine, left out
    c = got["scatter transfer callback failed"]
    assert c.function == "TransferEngine::ScatterTransferOperation::Impl::complete"


def test_c_printf_formats_typed_and_named():
    got = _by_template(statements(UCX_C, "src/ucp/wireup/select.c"))
    e = got[f"no {P} transport to {P}: {P}"]
    assert (e.what, e.function, e.condition) == ("ERROR", "ucp_wireup_select_transport", "show_error")
    assert e.params == ("title", "name", "tls_info")  # criteria->title, address->name, tls_info
    w = got[f"iface {P}: {P} bytes left at {P}%"]  # `"%" PRIx64`: one hex value
    assert w.what == "WARNING" and w.params == ("iface", "length", "level")
    f = got[f"[{P}:{P}] FATAL: UCX library was compiled with {P} but CPU does not support it.\n"]
    assert f.what == "CRITICAL" and f.function == "ucs_check_cpu_flags" and f.params[2] == "flag"
    d = got[f"tcp_ep {P} (state={P}): {P}({P}) failed: {P}"]  # src/uct/tcp/tcp_ep.c
    assert d.what == "ERROR" and d.params == ("ep", "state", "op_str", "fd", "err")  # a run-time level
    assert len(got) == 4  # ucs_trace is debug; fprintf(stderr) without a severity is not a log line


def test_go_logr_and_errors():
    got = _by_template(statements(SIDECAR_GO, "internal/proxy/proxy.go"))
    e = got["waiting for vLLM to be ready"]
    assert (e.kind, e.what, e.function) == ("log", "ERROR", "Server.createRoutes")
    assert e.condition == "case errors.Is(err, syscall.ECONNREFUSED)"  # a switch branch is its test
    assert got["http: proxy error"].condition is None  # `default:`
    assert "debug only" not in got  # V(4).Info: verbosity-gated
    f = got["failed to get Kubernetes config (ensure running in a pod with proper RBAC): " + P]
    assert (f.kind, f.what, f.params, f.condition) == ("raise", "error", ("err",), "err != nil")
    assert f.function == "newAllowlistValidator"
    u = got[f"failed to unmarshal request body: {P}"]  # `interface{}` in the signature opens no block
    assert u.function == "Server.parseSGLangRequest" and u.condition == "err != nil"
    g = got[f"failed to sync InferencePool cache within timeout (pool '{P}', {P} tries)"]
    assert g.params == ("poolName", "n")


def test_named_placeholders_survive_the_data_file_and_merge():
    a: dict = {}
    b: dict = {}
    build.add_statements(
        a, "ucx", "1.18.1", [("src/ucp/wireup/select.c", s) for s in statements(UCX_C, "select.c")]
    )
    build.add_statements(
        b, "ucx", "1.20.1", [("src/ucp/wireup/select.c", s) for s in statements(UCX_C, "select.c")]
    )
    build.add_release(
        b, "vllm", "0.33.0", [("v1/x.py", "import logging\nlogger.error('the engine is dead: %s', e)\n")]
    )
    build.merge(a, build.loads(build.dumps(b)))
    ix = origins.OriginIndex(build.loads(build.dumps(a)))
    assert ix.releases["ucx"] == ("1.18.1", "1.20.1") and ix.releases["vllm"] == ("0.33.0",)
    o = ix.match("no active messages transport to <no debug data>: tcp - no am bcopy", "ERROR", "select.c")
    assert o is not None and o.releases == ("1.18.1", "1.20.1")
    assert o.text == "no {title} transport to {name}: {tls_info}"
    # 15 literal characters: counted only when the line names the template's file
    assert ix.match("no active messages transport to x: y", "ERROR") is None


def test_packaged_others_index():
    ix = origins.load()
    for pkg in ("libnixl", "ucx", "mooncake", "llm-d-routing-sidecar", "lmcache", "vllm_ascend", "dynamo"):
        assert len(ix.releases.get(pkg, ())) >= 2, pkg
    assert ix.releases["vllm"], "vLLM's own index is merged in too"
    assert origins.OTHERS.stat().st_size < 1_500_000
    named = [o for o in ix.origins if o.package == "ucx" and o.holes]
    assert named and all(len(o.holes) == (o.template or "").count(P) for o in named)
