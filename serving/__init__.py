"""Serving: start TF Serving on an export (or the stand-in server, serving/standin/), clients over REST and gRPC, batch prediction with Beam, Kubernetes manifests, the demo's last step."""
