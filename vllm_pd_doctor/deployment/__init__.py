"""The one reader of a deployment, below the features that read one: the --config file, --prefill-cmd
/ --decode-cmd and --set -> the typed servers (reader.py), --model or the servers' model -> what
config.json says (model.py), the engines given by URL (urls.py). check-config, triage, status and
report call it.
"""
