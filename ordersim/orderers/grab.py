from ordersim.orderers.d_grab import DistributedGraB


class GraB(DistributedGraB):
    name = "grab"
    description = "GraB (centralized, m = 1): balance g minus the previous epoch's mean gradient, herding reorder"
    centralized_alternatives = ("d-grab", "cd-grab")
