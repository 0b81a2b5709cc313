"""Flower FedAvg on the peer benchmark's workload (bench/peer.py): a ServerApp and a ClientApp."""
