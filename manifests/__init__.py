"""manifests"""
