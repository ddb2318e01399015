"""TF Serving on Kubernetes: manifests for an export on GCS, or one KServe InferenceService.

    .venv/bin/python -m serving.k8s --model_base_path gs://BUCKET/run/export/image_classifier --output_dir k8s/
    .venv/bin/python -m serving.k8s --model_base_path gs://BUCKET/run/export/image_classifier --output_dir k8s/ --kserve

docs/serving.md, "Serving on Kubernetes", has the commands around it (cluster, apply, rollout).
"""
