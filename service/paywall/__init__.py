"""Paid tools: the gate in front of them, URL elicitations, the payment page, completion delivery."""
