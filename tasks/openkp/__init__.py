"""OpenKP (MS MARCO keyphrase extraction) with ETC-RealFormer."""
