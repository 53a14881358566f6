"""scripts"""
